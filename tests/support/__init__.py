"""Builders and fakes shared by the tests, imported by qualified name (``tests.support.fakes``).

- ``builders``: raw config dicts in, typed config and manifests out (config and compile tests);
- ``component_kit``: Pulumi mocks that record a component's children (tests/component);
- ``policy_helpers``: run one policy rule over a world of objects (tests/policies);
- ``fakes``: an in-memory Kubernetes API for the providers (tests/providers, tests/faults);
- ``fixture_crds``: the test CRDs the cluster tests need (tests/integration, tests/faults);
- ``fault_kit``, ``chaos_proxy``, ``no_cluster``, ``bad_configs``: fault injection (tests/faults,
  tests/security);

What the benchmarks run too (the project harness, the loopback hub and S3 store, the gateway and
router kits) is in ``testkit/``, beside tests/: bench/ imports no test module.
"""
