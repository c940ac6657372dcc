"""A stand-in for jaxlib that refuses to import: see tests/without_jax/README.md."""

raise ImportError("jaxlib is blocked in the run of the tests marked no_jax "
                  "(INFERBOOK_TESTS_WITHOUT_JAX=1): a test that reaches JAX must not carry the "
                  "no_jax marker, so that it also runs under the oldest JAX")
