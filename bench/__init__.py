"""dglu's benchmark harness: the fused op beside what users can write in PyTorch today.

``bash bench/run.sh [wheel]`` installs the wheel and runs ``python -m bench`` on the GPU
machine; ``python -m bench --dry-run`` exercises the report path with fake timings on any
machine; ``python -m bench.jit_compile_time`` times CuTe DSL JIT compilation on the CPU;
``python -m bench.mxfp8`` times the MXFP8 fused op beside the BF16 one and the unfused torch
path (GPU machine, wheel installed); ``bash bench/ncu.sh [wheel] SHAPE`` profiles the fused
op's main kernel and torch._grouped_mm's GEMM on one shape with Nsight Compute.
"""
