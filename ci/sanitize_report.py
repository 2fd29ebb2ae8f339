"""Read compute-sanitizer logs (ci/sanitize.sh) and print the one summary line.

memcheck, synccheck and initcheck: the tool's "ERROR SUMMARY: N errors" line; when it is
not 0, the printed errors are also counted per sanitize case (the "sanitize case ok: NAME"
line ci/sanitize_cases.py prints after each call: the errors before it are that call's) and
per kernel, one line each above the summary.
racecheck: every reported hazard pair ("Race reported between <kind> access at <where>"
and each following "and <kind> access at <where> [N hazards]") is matched against the
accepted list (ci/racecheck_accepted.txt): kernel symbol glob, then the two accesses as
KIND@0xOFFSET in either order. A pair not on the list is new and fails the check; so does
a log without its summary line (the tool or the calls failed).

Usage: sanitize_report.py LOG_DIR ACCEPTED_FILE DEVICE WHEEL
(LOG_DIR holds sanitize-<tool>.log and sanitize-<tool>.rc)
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from fnmatch import fnmatchcase
from pathlib import Path
from typing import NamedTuple

ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")
RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")
RACE_FIRST = re.compile(r"(?:Error|Warning|ERROR|WARNING): Race reported between (\w+) access at (.+)$")
RACE_OTHER = re.compile(r"^=+\s+and (\w+) access at (.+?)\s*\[(\d+) hazards?\]")
AT_SYMBOL = re.compile(r"([A-Za-z_][\w$.]*)\+0x([0-9a-fA-F]+)")
AT_ADDRESS = re.compile(r"0x([0-9a-fA-F]+) in (.+)")
ERROR_FIRST = re.compile(r"^=+ (?!COMPUTE-SANITIZER|ERROR SUMMARY)(\S.*)$")
ERROR_AT = re.compile(r"^=+\s+at (.+)$")
CASE_DONE = re.compile(r"^sanitize case ok: (\S+)")
NO_CASE = "(no case finished after them)"


class Access(NamedTuple):
    kind: str  # "read" or "write"
    offset: int

    def __str__(self) -> str:
        return f"{self.kind}@{self.offset:#x}"


class Hazard(NamedTuple):
    symbol: str
    accesses: frozenset[Access]
    count: int
    severity: str

    def __str__(self) -> str:
        pair = "  ".join(sorted(map(str, self.accesses)))
        return f"{self.symbol}  {pair}  [{self.count} hazards, {self.severity}]"


class Accepted(NamedTuple):
    symbol_glob: str
    accesses: frozenset[Access]

    def matches(self, hazard: Hazard) -> bool:
        return fnmatchcase(hazard.symbol, self.symbol_glob) and hazard.accesses == self.accesses


def parse_location(where: str) -> tuple[str, int]:
    """(kernel symbol, offset) of "sym+0x2e30" or "0x2e30 in file:line:sym(args)"."""
    found = AT_SYMBOL.search(where)
    if found:
        return found.group(1), int(found.group(2), 16)
    found = AT_ADDRESS.search(where)
    if not found:
        raise ValueError(f"racecheck location not understood: {where!r}")
    names = re.findall(r"[A-Za-z_]\w*", found.group(2).split("(")[0])
    return names[-1], int(found.group(1), 16)


def parse_access(kind: str, where: str) -> tuple[str, Access]:
    symbol, offset = parse_location(where.strip())
    return symbol, Access(kind.lower(), offset)


def hazards(log: str) -> list[Hazard]:
    """Every (first access, other access) pair racecheck reported, with its hazard count."""
    found: list[Hazard] = []
    first = None
    severity = ""
    for line in log.splitlines():
        head = RACE_FIRST.search(line)
        if head:
            severity = "error" if head.group(0).lower().startswith("error") else "warning"
            first = parse_access(head.group(1), head.group(2).split("[")[0])
            continue
        other = RACE_OTHER.search(line)
        if other and first is not None:
            symbol, access = parse_access(other.group(1), other.group(2))
            found.append(Hazard(first[0], frozenset({first[1], access}), int(other.group(3)), severity))
        elif not line.startswith("=========     "):
            first = None
    return found


def error_sites(log: str) -> dict[str, Counter[str]]:
    """The errors a log prints, per sanitize case (NO_CASE for those after the last case
    line), counted by the kernel symbol of their first "at" line."""
    sites: dict[str, Counter[str]] = {}
    pending: Counter[str] = Counter()
    reported = False  # an error line seen, its "at" line not yet
    for line in log.splitlines():
        done = CASE_DONE.match(line)
        if done:
            if pending:
                sites.setdefault(done.group(1), Counter()).update(pending)
            pending, reported = Counter(), False
            continue
        at = ERROR_AT.match(line)
        if at and reported:
            try:
                kernel = parse_location(at.group(1))[0]
            except ValueError:
                kernel = at.group(1)
            pending[kernel] += 1
            reported = False
        elif ERROR_FIRST.match(line):
            reported = True
    if pending:
        sites.setdefault(NO_CASE, Counter()).update(pending)
    return sites


def print_error_sites(tool: str, log: str) -> None:
    for case, kernels in error_sites(log).items():
        top = ", ".join(f"{kernel} {count}" for kernel, count in kernels.most_common(3))
        print(f"{tool}: {sum(kernels.values())} printed errors in case {case}: {top}")


def read_accepted(path: Path) -> list[Accepted]:
    """The accepted list: "SYMBOL_GLOB KIND@0xOFF KIND@0xOFF" lines; # starts a comment."""
    accepted = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        fields = raw.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 3:
            raise SystemExit(f"{path}:{number}: want 'SYMBOL_GLOB KIND@0xOFF KIND@0xOFF', got {raw!r}")
        accesses = []
        for field in fields[1:]:
            kind, _, offset = field.partition("@")
            if kind not in ("read", "write") or not offset.startswith("0x"):
                raise SystemExit(f"{path}:{number}: access {field!r} is not read@0x.. or write@0x..")
            accesses.append(Access(kind, int(offset, 16)))
        accepted.append(Accepted(fields[0], frozenset(accesses)))
    return accepted


def error_count(tool: str, log: str) -> int | None:
    found = ERROR_SUMMARY.findall(log)
    return int(found[-1]) if found else None


def summarize(log_dir: Path, accepted_path: Path, device: str, wheel: str) -> tuple[str, bool]:
    """The summary line and whether the check passed; new hazards are printed above it."""
    parts, ok = [], True
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        log_path = log_dir / f"sanitize-{tool}.log"
        log = log_path.read_text(errors="replace") if log_path.is_file() else ""
        rc_path = log_dir / f"sanitize-{tool}.rc"
        rc = rc_path.read_text().strip() if rc_path.is_file() else "missing"
        if tool == "racecheck":
            summary = RACE_SUMMARY.search(log)
            if summary is None or rc != "0":
                parts.append(f"racecheck FAILED TO RUN (exit {rc}; see {log_path.name})")
                ok = False
                continue
            accepted = read_accepted(accepted_path)
            reported = hazards(log)
            new = [h for h in reported if not any(a.matches(h) for a in accepted)]
            for hazard in new:
                print(f"new racecheck hazard: {hazard}")
            total = sum(h.count for h in reported)
            parts.append(
                f"racecheck {len(reported)} hazard pairs, {total} hazards "
                f"({len(reported) - len(new)} pairs accepted, {len(new)} new)"
            )
            ok = ok and not new
            continue
        errors = error_count(tool, log)
        if errors is None or rc != "0":
            parts.append(f"{tool} FAILED TO RUN (exit {rc}; see {log_path.name})")
            ok = False
            continue
        if errors:
            print_error_sites(tool, log)
        parts.append(f"{tool} {errors} errors")
        ok = ok and errors == 0
    return f"SANITIZE: {', '.join(parts)} (device: {device}, wheel: {wheel})", ok


def main() -> int:
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    line, ok = summarize(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4])
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
