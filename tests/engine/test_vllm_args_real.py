"""`validate` refuses a model's own args as the real `vllm serve` does, on each release line.

The real CLI of each line (the engine kit's venv: testkit/engine_kit.py ``kit_dir``) runs its own
``main()`` on ``vllm serve /models <args>`` for every case of the table, with the subcommand's
body replaced by an exit (nothing is served: only the parse runs); its exit status and
``error:`` line are compared with what ``validate`` says for ``models.0.args`` from the committed
parser description (components/config/vllm_lines/<line>.json). Also: each committed description
is what the line's real parser gives now (scripts/gen_vllm_line.py re-run in the kit). Both come
from one run of the kit's python per line: importing vLLM is most of either's cost.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from components.config import ConfigError, load_stack_config
from components.config.vllm_release import FACTS_DIR, RELEASES
from testkit.engine_kit import cpu_env, kit_dir
from tests.support.builders import model

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[2]
# (args, lines that refuse them); the others accept them. Every refusal kind argparse has.
CASES = [
    (["--max-num-seqs", "abc"], {"0.11", "0.32"}),                 # invalid int value
    (["--no-such-flag"], {"0.11", "0.32"}),                        # unrecognized arguments
    (["--dtype", "float8"], {"0.11", "0.32"}),                     # invalid choice
    (["--gpu-memory-utilization", "lots"], {"0.11", "0.32"}),      # invalid float value
    (["--max-model-len"], {"0.11", "0.32"}),                       # expected one argument
    (["--kv-cache-memory-bytes", "1.5K"], {"0.11", "0.32"}),       # the type's own message
    (["--max-num-batched-tokens", "many"], {"0.11", "0.32"}),      # human_readable_int
    (["--max-cpu-loras", "many"], {"0.11", "0.32"}),               # vLLM's optional_type message
    (["--enable-lora-bias"], {"0.32"}),                            # removed after 0.11
    (["--lora-extra-vocab-size", "256"], {"0.32"}),                # removed after 0.11
    (["--max-model-len", "8k", "--max_num_seqs=8", "--no-enable-prefix-caching"], set()),
    (["--max-num-seq", "4"], set()),                               # an abbreviation argparse allows
]
DRIVER = r"""
import contextlib, io, json, runpy, sys
cases_path, out_path, generator, line, description_path = sys.argv[1:6]
# The line's description first, by the generator itself, before anything below patches vLLM.
sys.argv = [generator, line, description_path]
try:
    runpy.run_path(generator, run_name="__main__")
except SystemExit as exit:
    if exit.code:
        raise
import vllm.entrypoints.cli.serve as serve
from vllm.entrypoints.cli.main import main
serve.ServeSubcommand.cmd = staticmethod(lambda args: sys.exit(0))   # parse only: never serve
serve.ServeSubcommand.validate = lambda self, args: None
results = []  # main() reads sys.argv, which the loop sets
for args in json.load(open(cases_path)):
    sys.argv = ["vllm", "serve", "/models", *args]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            main()
        code = 0
    except SystemExit as exit:
        code = exit.code
    lines = [l for l in err.getvalue().splitlines() if ": error: " in l]
    results.append({"code": code, "error": lines[-1].split(": error: ", 1)[1] if lines else None})
json.dump(results, open(out_path, "w"))
"""


def kit_python(line: str) -> Path:
    """The line's venv from the engine kit (installed on first use; a failed install fails here,
    no route to PyPI skips, saying so)."""
    return kit_dir(line) / "bin" / "python"


_RUNS: dict[str, dict] = {}


def real_parser(line: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The line's real parser, asked once per line: ``refusals`` (per case: exit code and
    ``error:`` text) and ``description`` (what scripts/gen_vllm_line.py writes now)."""
    if line not in _RUNS:
        tmp = tmp_path_factory.mktemp(f"vllm-{line}")
        cases, out, driver, fresh = tmp / "cases.json", tmp / "out.json", tmp / "driver.py", tmp / f"{line}.json"
        cases.write_text(json.dumps([args for args, _ in CASES]))
        driver.write_text(DRIVER)
        done = subprocess.run([str(kit_python(line)), str(driver), str(cases), str(out),
                               str(ROOT / "scripts" / "gen_vllm_line.py"), line, str(fresh)],
                              env=cpu_env(tmp), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        _RUNS[line] = {"refusals": json.loads(out.read_text()), "description": json.loads(fresh.read_text())}
    return _RUNS[line]


def ours(line: str, args: list[str]) -> str | None:
    try:
        load_stack_config({"platform": {"vllmRelease": line}, "models": [model("m", args=args)]})
    except ConfigError as error:
        return str(error)
    return None


@pytest.mark.parametrize("line", sorted(RELEASES))
def test_validate_refuses_what_the_real_vllm_serve_refuses_in_its_words(line, tmp_path_factory):
    for (args, refusing), real in zip(CASES, real_parser(line, tmp_path_factory)["refusals"], strict=True):
        mine = ours(line, args)
        if line not in refusing:
            assert real == {"code": 0, "error": None} and mine is None, (args, real, mine)
            continue
        assert real["code"] == 2 and real["error"], (args, real)
        assert mine is not None, f"vLLM {line} refuses {args} ({real['error']}) and validate accepts it"
        assert "models.0.args" in mine and f"vLLM {line}" in mine, mine
        # argparse's own sentence, as the real parser words it (a function's repr carries an address).
        assert re.sub(r" at 0x[0-9a-f]+", "", real["error"]) in mine, (args, real["error"], mine)


@pytest.mark.parametrize("line", sorted(RELEASES))
def test_the_committed_description_is_what_the_real_parser_gives(line, tmp_path_factory):
    committed = json.loads((FACTS_DIR / f"{line}.json").read_text())
    assert real_parser(line, tmp_path_factory)["description"] == committed, (
        f"components/config/vllm_lines/{line}.json is stale: regenerate it with scripts/gen_vllm_line.py")


def test_the_driver_runs_on_this_python():
    # The driver is Python 3 source the kit's interpreter runs; a syntax slip would show as a
    # failing engine run rather than here.
    compile(DRIVER, "driver", "exec")
    assert sys.version_info >= (3, 10)
