"""Compiling the smoke specs for real: the artifact directory, its manifest,
and the manifest's ABI checked against what ptxas wrote into each cubin."""

from __future__ import annotations

import copy
import dataclasses
import glob
import hashlib
import importlib.metadata
import json
import platform
import re
import subprocess
import sysconfig
from pathlib import Path

import pytest

from dglu_build.abi_check import AbiMismatch, check_kernels, check_tma_rules
from dglu_build.artifact_store import STATE_DIR, STORED_FIELDS, cubin_file_name
from dglu_build.build import BUILD_FIELDS, COMPILED_FIELDS, BuildError, BuildFailed, build_artifacts
from dglu_build.kernels.registry import families
from dglu_build.cubin_info import CubinError, read_cubin
from dglu_build.kernels import compile_variant
from dglu_build.progress import LineProgress
from dglu_build.specs import load_specs
from dglu.contract.index import INDEX_FILE

REPO_ROOT = Path(__file__).resolve().parents[2]
SMOKE = load_specs(REPO_ROOT / "kernel_specs" / "smoke.yaml")

pytestmark = pytest.mark.slow


@dataclasses.dataclass
class Artifacts:
    out_dir: Path
    manifest: dict
    progress: list[str]

    def cubin(self, variant: dict) -> bytes:
        return (self.out_dir / variant["cubin"]).read_bytes()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Artifacts:
    out_dir = tmp_path_factory.mktemp("artifacts") / "smoke"
    progress: list[str] = []
    result = build_artifacts(SMOKE, out_dir, progress=LineProgress(progress.append))
    return Artifacts(out_dir, result.manifest, progress)


# --- the artifact directory -----------------------------------------------------


def test_manifest_on_disk_is_the_one_returned(artifacts):
    assert json.loads((artifacts.out_dir / "manifest.json").read_text()) == artifacts.manifest


def test_manifest_lists_each_variant_once_by_name_with_its_key(artifacts):
    variants = artifacts.manifest["variants"]
    assert [v["name"] for v in variants] == sorted(s.name for s in SMOKE)
    by_name = {s.name: s for s in SMOKE}
    for variant in variants:
        assert variant["key"] == by_name[variant["name"]].key
        assert variant["cubin"] == cubin_file_name(variant["name"], variant["sha256"])


def test_each_variant_records_its_build_and_the_driver_its_cubin_needs(artifacts):
    manifest = artifacts.manifest
    assert manifest["schema_version"] == 3 and set(manifest) == {"schema_version", "fronts", "variants"}
    runtime_init = (REPO_ROOT / "runtime" / "dglu" / "__init__.py").read_text()
    for variant in manifest["variants"]:
        build, cubin = variant["build"], read_cubin(artifacts.cubin(variant))
        assert f'__version__ = "{build["dglu_version"]}"' in runtime_init
        assert build["source_hash"] == families()[variant["family"]].sources_hash()
        assert build["toolchain"] == {
            "cutlass_dsl": importlib.metadata.version("nvidia-cutlass-dsl"),
            "ptxas": cubin.toolkit,
            "python": platform.python_version(),
        }
        major = int(cubin.toolkit.split(".")[0])
        assert variant["min_driver"] == 1000 * major  # e.g. CUDA 13.4 -> 13000 (minor version compatibility)


def test_each_entry_holds_the_builds_the_stores_and_the_kernel_familys_fields(artifacts):
    for variant in artifacts.manifest["variants"]:
        # flags: optional in a manifest; the BF16 family declares its runtime flag
        assert set(variant) == {*BUILD_FIELDS, *STORED_FIELDS, *COMPILED_FIELDS, "flags"}
        assert variant["family"] == "sm90_bf16"
        assert variant["flags"] == ["round_dgrad_to_input_dtype"]


def test_cubins_match_their_sha256_and_size_and_nothing_else_is_left(artifacts):
    for variant in artifacts.manifest["variants"]:
        data = artifacts.cubin(variant)
        assert hashlib.sha256(data).hexdigest() == variant["sha256"]
        assert len(data) == variant["size"]
    expected = {"manifest.json", INDEX_FILE, STATE_DIR} | {v["cubin"] for v in artifacts.manifest["variants"]}
    assert {path.name for path in artifacts.out_dir.iterdir()} == expected


def test_progress_has_a_plan_then_one_line_per_variant_with_count_and_eta(artifacts):
    names = [v["name"] for v in artifacts.manifest["variants"]]
    plan, *lines = artifacts.progress
    assert plan.startswith(f"{artifacts.out_dir}: {len(names)} variants, 0 up to date, {len(names)} to compile in ")
    assert len(lines) == len(names)
    finished = []
    for done, line in enumerate(lines, start=1):
        match = re.fullmatch(rf"\[{done}/{len(names)}, ETA \d+:\d\d\] (\w+) \d+\.\ds", line)
        assert match, line
        finished.append(match[1])
    assert sorted(finished) == names


def test_each_variant_has_a_main_kernel_first_and_dbias_finish_only_with_dbias(artifacts):
    for variant in artifacts.manifest["variants"]:
        roles = [kernel["role"] for kernel in variant["kernels"]]
        assert roles == (["main", "dbias_finish"] if variant["key"]["dbias"] else ["main"])
        for kernel in variant["kernels"]:
            assert kernel["symbol"].startswith("dglu_" + variant["name"])


def test_the_runtime_reads_the_manifest_and_verifies_every_cubin(artifacts):
    from dglu.integrity import read_verified_cubin
    from dglu.manifest import read_manifest

    manifest = read_manifest(artifacts.out_dir)
    assert [variant.name for variant in manifest.variants] == [v["name"] for v in artifacts.manifest["variants"]]
    for variant, written in zip(manifest.variants, artifacts.manifest["variants"]):
        assert read_verified_cubin(variant) == artifacts.cubin(written)


# --- the manifest's ABI against the cubin ----------------------------------------


def test_manifest_params_match_the_cubins_kparam_info(artifacts):
    for variant in artifacts.manifest["variants"]:
        cubin = read_cubin(artifacts.cubin(variant))
        assert cubin.sm == 90
        assert sorted(cubin.kernels) == sorted(k["symbol"] for k in variant["kernels"])
        for kernel in variant["kernels"]:
            found = cubin.kernels[kernel["symbol"]]
            assert list(found.reqntid) == kernel["block"]
            assert [p.ordinal for p in found.params] == list(range(len(kernel["params"])))
            assert [p["size"] for p in kernel["params"]] == [p.size for p in found.params]
            end = 0
            for param, actual in zip(kernel["params"], found.params):
                assert (found.param_base + actual.offset) % param["align"] == 0, param["name"]
                assert end <= actual.offset < end + param["align"], param["name"]
                end = actual.offset + actual.size
            assert end == found.param_bytes
        check_kernels(variant["kernels"], cubin, variant["name"])
        check_tma_rules(variant["kernels"], variant["tma"], variant["name"])


def _cuobjdump() -> str | None:
    found = glob.glob(str(Path(sysconfig.get_paths()["purelib"]) / "nvidia" / "*" / "bin" / "cuobjdump"))
    return found[0] if found else None


@pytest.mark.skipif(_cuobjdump() is None, reason="cuobjdump (pip package nvidia-cuda-cuobjdump) is not installed")
def test_cubin_reader_agrees_with_cuobjdump(artifacts):
    for variant in artifacts.manifest["variants"]:
        path = artifacts.out_dir / variant["cubin"]
        text = subprocess.run([_cuobjdump(), "-elf", str(path)], check=True, capture_output=True, text=True).stdout
        info = read_cubin(path.read_bytes())
        for symbol, kernel in info.kernels.items():
            # the kernel's records: up to the next section's header (a line starting with ".")
            section = re.split(r"\n(?=\.)", text.split(f"\n.nv.info.{symbol}\n", 1)[1], maxsplit=1)[0]
            params = re.findall(r"Ordinal : (0x[0-9a-f]+)\s+Offset\s+: (0x[0-9a-f]+)\s+Size\s+: (0x[0-9a-f]+)", section)
            assert sorted((int(o, 16), int(off, 16), int(s, 16)) for o, off, s in params) == [
                (p.ordinal, p.offset, p.size) for p in kernel.params
            ]
            reqntid = re.search(r"EIATTR_REQNTID\n\s+Format:\s+\w+\n\s+Value:\s+(\S+) (\S+) (\S+)", section)
            assert tuple(int(v, 16) for v in reqntid.groups()) == kernel.reqntid
            assert f"sm={info.sm}" in text
        header = re.search(r"ABI=(\d+), sm=\d+a?, toolkit=([\d.]+)", text)  # CUDA 13's cuobjdump names both
        if header:
            assert (int(header[1]), header[2]) == (info.abi_version, info.toolkit)


def test_cubin_reader_rejects_what_is_not_a_cubin():
    with pytest.raises(CubinError, match="not a little-endian ELF64 file"):
        read_cubin(b"\x7fELF\x01\x01" + bytes(64))
    elf_for_x86 = b"\x7fELF\x02\x01\x01" + bytes(9) + (2).to_bytes(2, "little") + (62).to_bytes(2, "little") + bytes(44)
    with pytest.raises(CubinError, match=r"ELF machine is 62, not CUDA \(190\)"):
        read_cubin(elf_for_x86)


def _first(params: list[dict], kind: str) -> int:
    return next(index for index, param in enumerate(params) if param["kind"] == kind)


def _grow_tuple(params):
    index = _first(params, "i32_tuple")
    param = params[index]
    size = param["size"]
    param.update(size=size + 4, values=param["values"] + ["l"])
    return rf"param {index} \('{param['name']}'\): size {size + 4} but the cubin has {size}"


def _misalign_tuple(params):
    param = params[_first(params, "i32_tuple")]
    param["align"] = 8
    return rf"a i32_tuple has size {param['size']} and align 4, the manifest says size {param['size']} and align 8"


def _unknown_kind(params):
    index = _first(params, "pointer")
    params[index]["kind"] = "int64"
    return rf"param {index} \('{params[index]['name']}'\): unknown kind 'int64'"


def _swap_first_two(params):
    params[0], params[1] = params[1], params[0]
    assert params[0]["size"] != params[1]["size"]
    return rf"param 0 \('{params[0]['name']}'\): size {params[0]['size']} but the cubin has {params[1]['size']}"


def _drop_last(params):
    params.pop()
    return rf"{len(params)} params in the manifest, {len(params) + 1} in the cubin"


PARAM_MUTATIONS = [_grow_tuple, _misalign_tuple, _unknown_kind, _swap_first_two, _drop_last]


@pytest.mark.parametrize("mutate", PARAM_MUTATIONS, ids=lambda mutate: mutate.__name__)
def test_abi_check_names_each_kind_of_param_mismatch(artifacts, mutate):
    variant = artifacts.manifest["variants"][0]
    kernels = copy.deepcopy(variant["kernels"])
    expected = mutate(kernels[0]["params"])
    with pytest.raises(AbiMismatch, match=expected):
        check_kernels(kernels, read_cubin(artifacts.cubin(variant)), variant["name"])


def test_abi_check_names_a_wrong_block_or_symbol(artifacts):
    variant = artifacts.manifest["variants"][0]
    cubin = read_cubin(artifacts.cubin(variant))
    block = variant["kernels"][0]["block"]
    wrong_block = copy.deepcopy(variant["kernels"])
    wrong_block[0]["block"] = [block[0] + 32, 1, 1]
    with pytest.raises(AbiMismatch, match=re.escape(f"block {[block[0] + 32, 1, 1]} but the cubin requires {block}")):
        check_kernels(wrong_block, cubin, variant["name"])
    wrong_symbol = copy.deepcopy(variant["kernels"])
    wrong_symbol[0]["symbol"] = "dglu_other_main"
    with pytest.raises(AbiMismatch, match=r"the manifest lists kernels \[.*'dglu_other_main'.*\], the cubin has"):
        check_kernels(wrong_symbol, cubin, variant["name"])


def test_abi_check_catches_a_cubin_that_places_a_param_elsewhere(artifacts):
    variant = artifacts.manifest["variants"][0]
    cubin = read_cubin(artifacts.cubin(variant))
    symbol = variant["kernels"][0]["symbol"]
    kernel = cubin.kernels[symbol]
    index = _first(variant["kernels"][0]["params"], "pointer")
    params = list(kernel.params)
    placed, previous = params[index].offset, params[index - 1]
    params[index] = dataclasses.replace(params[index], offset=placed + 8)
    moved = dataclasses.replace(cubin, kernels={symbol: dataclasses.replace(kernel, params=tuple(params))})
    expected = (
        rf"param {index} \('\w+'\): the cubin places it at offset {placed + 8}, "
        rf"but align 8 after offset {previous.offset + previous.size} gives {placed}"
    )
    with pytest.raises(AbiMismatch, match=expected):
        check_kernels(variant["kernels"][:1], moved, variant["name"])
    shorter = dataclasses.replace(cubin, kernels={symbol: dataclasses.replace(kernel, param_bytes=kernel.param_bytes + 4)})
    with pytest.raises(AbiMismatch, match=rf"params end at {kernel.param_bytes} but the cubin has {kernel.param_bytes + 4} bytes"):
        check_kernels(variant["kernels"][:1], shorter, variant["name"])


def _drop_rule(tma):
    tma.pop("b")
    return re.escape(f"param 'tma_b': no TMA rule for tensor 'b'; rules exist for {sorted(tma)}")


def _drop_swizzle(tma):
    tma["a"].pop("swizzle")
    return r"param 'tma_a': TMA rule of 'a' lacks swizzle"


def _repeat_a_dim(tma):
    box = tma["b"]["box"]
    tma["b"]["dims"] = [0] * len(box)
    return re.escape(f"dims {[0] * len(box)} must order the {len(box)} dimensions of box {box}")


@pytest.mark.parametrize("mutate", [_drop_rule, _drop_swizzle, _repeat_a_dim], ids=lambda mutate: mutate.__name__)
def test_tma_rule_check_names_the_param_and_the_problem(artifacts, mutate):
    variant = artifacts.manifest["variants"][0]
    tma = copy.deepcopy(variant["tma"])
    expected = mutate(tma)
    with pytest.raises(AbiMismatch, match=expected):
        check_tma_rules(variant["kernels"], tma, variant["name"])


# --- failures ---------------------------------------------------------------------
# Compiles run in spawned worker processes, so the stand-in compilers are module-level functions.


def compile_all_but_dswiglu(key, symbol_prefix):
    if key["act_func"] == "dswiglu":
        raise RuntimeError("compiler crashed")
    return compile_variant(key, symbol_prefix)


def compile_with_wrong_block(key, symbol_prefix):
    result = compile_variant(key, symbol_prefix)
    entry = copy.deepcopy(result.entry)
    entry["kernels"][0]["block"] = [128, 1, 1]
    return dataclasses.replace(result, entry=entry)


def compile_without_tma(key, symbol_prefix):
    result = compile_variant(key, symbol_prefix)
    return dataclasses.replace(result, entry={name: value for name, value in result.entry.items() if name != "tma"})


def compile_claiming_a_name(key, symbol_prefix):
    result = compile_variant(key, symbol_prefix)
    return dataclasses.replace(result, entry={**result.entry, "name": "other", "min_driver": 1})


def compile_for_sm100(key, symbol_prefix):
    result = compile_variant(key, symbol_prefix)
    cubin = bytearray(result.cubin)
    # e_flags of the ELF64 header: its low byte is the SM in ELF ABI 7, its second from ABI 8
    flags_offset = 48 + (cubin[8] >= 8)
    cubin[flags_offset] = 100
    return dataclasses.replace(result, cubin=bytes(cubin))


def must_not_compile(key, symbol_prefix):
    raise AssertionError("compiled despite bad arguments")


def test_a_failed_compile_is_reported_and_the_rest_is_stored(tmp_path):
    lines: list[str] = []  # a plain callable hears the progress as lines
    with pytest.raises(BuildFailed) as caught:
        build_artifacts(SMOKE, tmp_path / "out", progress=lines.append, compile_fn=compile_all_but_dswiglu)
    result = caught.value.result
    (dswiglu,) = [v.name for v in SMOKE if v.act_func == "dswiglu"]
    assert any(re.fullmatch(rf"\[\d/2, ETA \d+:\d\d\] FAILED {dswiglu}: RuntimeError: compiler crashed .*", line) for line in lines)
    assert list(result.failed) == [dswiglu]
    assert "RuntimeError: compiler crashed" in result.failed[dswiglu]
    assert f"{dswiglu}:\n    RuntimeError: compiler crashed" in str(caught.value)
    assert [v["name"] for v in result.manifest["variants"]] == result.compiled == [v.name for v in SMOKE if v.name != dswiglu]
    assert json.loads((tmp_path / "out" / "manifest.json").read_text()) == result.manifest


def test_output_that_disagrees_with_its_cubin_is_rejected_before_writing(tmp_path):
    with pytest.raises(BuildFailed) as caught:
        build_artifacts(SMOKE[:1], tmp_path, progress=LineProgress(lambda line: None), compile_fn=compile_with_wrong_block)
    (message,) = caught.value.result.failed.values()
    assert re.match(r"variant sm90a_\w+: kernel dglu_\w+_main\w*: block \[128, 1, 1\]", message)
    assert not list(tmp_path.glob("*.cubin")) and not (tmp_path / "manifest.json").exists()


@pytest.mark.parametrize(
    ("compile_fn", "expected"),
    [
        (compile_without_tma, "the kernel family's entry lacks tma"),
        (compile_claiming_a_name, "the kernel family's entry sets name, min_driver, which the build writes"),
    ],
)
def test_a_family_entry_without_its_fields_or_with_the_builds_is_rejected(tmp_path, compile_fn, expected):
    with pytest.raises(BuildFailed) as caught:
        build_artifacts(SMOKE[:1], tmp_path, progress=LineProgress(lambda line: None), compile_fn=compile_fn)
    (message,) = caught.value.result.failed.values()
    assert message == f"variant {SMOKE[0].name}: {expected}"
    assert not (tmp_path / "manifest.json").exists()


def test_a_cubin_for_another_arch_is_rejected(tmp_path):
    with pytest.raises(BuildFailed) as caught:
        build_artifacts(SMOKE[:1], tmp_path, progress=LineProgress(lambda line: None), compile_fn=compile_for_sm100)
    assert "cubin is for sm_100, the variant's arch is sm_90a" in str(caught.value)


def test_bad_out_dir_and_empty_variants_fail_before_compiling(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(ValueError, match=r"file exists and is not a directory"):
        build_artifacts(SMOKE, not_a_dir, compile_fn=must_not_compile)
    with pytest.raises(BuildError, match="variants: got none, need at least one"):
        build_artifacts([], tmp_path / "out", compile_fn=must_not_compile)
