"""Building blocks the kernel families compose (CuTe DSL; import only to compile)."""
