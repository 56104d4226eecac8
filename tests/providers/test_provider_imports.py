"""What a deployed stack's provider host loads: the providers and the contract, not the app.

Provider classes are pickled into the stack's state and re-imported by module path on `pulumi
refresh` and `pulumi destroy`. Whatever ``providers.*`` imports must stay importable, and cheap,
for as long as deployed stacks exist, so it must not reach the config (pydantic models), the
compilers or the components. Each check runs in a fresh interpreter, as the provider host does:
in this process, other tests have long since imported everything. The import contract in
``.importlinter`` says the same statically; this is the runtime view (it also sees imports made
at import time through ``importlib`` or a plugin).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROVIDER_MODULES = sorted(f"providers.{p.stem}" for p in (ROOT / "providers").glob("*.py") if p.stem != "__init__")
CONTRACT_MODULES = sorted(f"contract.{p.stem}" for p in (ROOT / "contract").glob("*.py") if p.stem != "__init__")

LOADED = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""


def loaded_after_importing(*modules: str) -> set[str]:
    result = subprocess.run([sys.executable, "-c", LOADED, *modules], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return set(json.loads(result.stdout))


def test_every_provider_module_is_found() -> None:
    # The pickled paths a deployed stack's state names (tests/providers/state_compat_baseline.json).
    assert {"providers.status", "providers.nim_status", "providers.gate", "providers.crd_check",
            "providers.router_guard", "providers.router_targets"} <= set(PROVIDER_MODULES)


@pytest.mark.parametrize("module", PROVIDER_MODULES)
def test_a_provider_module_loads_neither_pydantic_nor_the_app(module: str) -> None:
    loaded = loaded_after_importing(module)
    app = sorted(m for m in loaded if m == "components" or m.startswith("components."))
    assert app == [], f"{module} loads the app: {app}"
    # (yaml is not in the list: the Pulumi SDK under pulumi.dynamic loads it itself.)
    assert not {"pydantic", "pulumi_kubernetes"} & loaded, f"{module} loads the config's or the renderer's library"


def test_the_contract_is_standard_library_only() -> None:
    loaded = loaded_after_importing(*CONTRACT_MODULES) - loaded_after_importing()  # minus the interpreter's own
    foreign = sorted({m.split(".")[0] for m in loaded} - set(sys.stdlib_module_names) - {"contract"})
    assert foreign == [], f"the contract loads {foreign}"
