"""The contract both sides of dglu share: pure Python (no cutlass, no torch, no CUDA).

- ``dglu.contract.keys``: the variant key's fields, each kernel family's allowed values,
  the activations and their constants, variant names, and the exact cubin architecture of
  each compute capability;
- ``dglu.contract.schema``: the manifest (docs/manifest.md), its strict reader and its
  canonical writer.

The build side (``dglu_build``) imports this package to validate spec files and write
manifests; the runtime imports it to read them. Nothing here may import anything but the
standard library.
"""
