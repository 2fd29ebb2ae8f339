"""Reference (not project code): compile a list of variants with compile_blockscaled.py, one process
each, and print per variant its compile facts and the cubin's ABI (inspect_cubin.py) as JSON lines.
   python measure.py OUTDIR "--recipe mxfp8 --prefix x" "--recipe nvfp4 --prefix y" ..."""
import json
import shlex
import subprocess
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
out = Path(sys.argv[1])
for flags in sys.argv[2:]:
    run = subprocess.run([sys.executable, str(here / "compile_blockscaled.py"), *shlex.split(flags), "--out", str(out)],
                         capture_output=True, text=True)
    if run.returncode:
        print(json.dumps({"flags": flags, "error": run.stderr.strip().splitlines()[-6:]}), flush=True)
        continue
    facts = json.loads(run.stdout.strip().splitlines()[-1])
    cubin = out / f"{facts['name']}.cubin"
    abi = json.loads(subprocess.run([sys.executable, str(here / "inspect_cubin.py"), str(cubin), str(cubin.with_suffix(".ptx"))],
                                    capture_output=True, text=True, check=True).stdout)
    print(json.dumps({"flags": flags, **facts, "abi": abi}), flush=True)
