"""Builders and fakes shared by the tests, imported by qualified name (``tests.support.fakes``).

- ``builders``: raw config dicts in, typed config and manifests out (config and compile tests);
- ``component_kit``: Pulumi mocks that record a component's children (tests/component);
- ``policy_helpers``: run one policy rule over a world of objects (tests/policies);
- ``fakes``: an in-memory Kubernetes API for the providers (tests/providers, tests/faults);
- ``harness``, ``fixture_crds``: a throwaway project copy on the real engine and simulated
  cluster, and the test CRDs it needs (tests/integration, tests/faults, bench);
- ``fault_kit``, ``chaos_proxy``, ``no_cluster``, ``bad_configs``: fault injection (tests/faults,
  tests/security);
- ``hf_server``: a local Hugging Face hub for the puller (tests/puller, bench).
"""
