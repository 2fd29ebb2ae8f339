"""The contract both sides of dglu share: pure Python (no cutlass, no torch, no CUDA).

- ``keys``: the variant key's fields, the activations and their constants, variant
  names, and the exact cubin architecture of each compute capability (the values each
  kernel family allows are the family's own: dglu_build.kernels.registry);
- ``element_types``: the element types the manifest names;
- ``expressions``: the manifest's EXPRESSIONs (``"2*n"``);
- ``schema``: the manifest's data model (docs/manifest.md); ``reader``: its strict reader;
  ``writer``: its canonical writer; ``index``: the manifest index (manifest-index.json);
- ``front``: a family's front policy; ``dispatch``: the dispatch table (dispatch.json);
- ``records``: the light NamedTuple base they are built on;
- ``errors``: the errors they raise (dglu.errors re-exports them).

The build side (``dglu_build``) imports this package to validate spec files and write
manifests; the runtime imports it to read them. Nothing here imports anything but the
standard library (tests/cpu/test_contract_imports.py checks this in a fresh interpreter).
"""
