"""llm-serving: LLM servers (vLLM, NIM) on Kubernetes, as a Pulumi program.

Subpackages: ``config`` (the typed stack config), ``compile`` (pure manifest builders) and the
thin ComponentResources in ``resources``. Importing this package pulls in no Pulumi code, so the
commands and the compilers run without the engine.
"""
