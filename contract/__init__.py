"""The contract between the app (config, compilers, components, CLI) and the dynamic providers.

What both sides must agree on, defined once: label keys and API names (``labels``), object names
derived on both sides (``names``), the typed props a component writes and a provider reads back
(``props``), the rules that turn EndpointSlices into routable targets (``targets``) and the
router's workload-kind guard (``workload_kind``).

Standard library only, no import-time side effects: provider code is pickled into a stack's state
and re-imported by module path on `pulumi refresh` and `pulumi destroy`, so whatever it imports
must stay importable, and cheap, for as long as deployed stacks exist. Keeping this layer below
both sides means a refactor of the config or the compilers cannot break destroying a deployed
stack (see docs/architecture.md; the layers are checked by `.importlinter`).
"""
