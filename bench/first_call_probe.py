"""Run in a fresh process by bench.host: the cost of dglu's first call beyond torch's.

torch is imported and CUDA initialised first, and every torch operation the call itself
uses is run once (allocation, fill, host read-back), so that what is timed after is
dglu's own: its import, then the first call (manifest, cubin load, descriptor encoding,
launch) up to the kernel's completion. Prints one JSON line of milliseconds.
"""

from __future__ import annotations

import json
import time


def main() -> None:
    start = time.perf_counter()
    import torch

    torch_imported = time.perf_counter()
    torch.cuda.init()
    from bench.inputs import make_buffer_set
    from bench.tiny_problem import TINY, wrapper_arguments

    generator = torch.Generator(device="cuda")
    generator.manual_seed(0)
    buffers = make_buffer_set(TINY, torch.device("cuda"), generator)
    buffers.padded_offsets.tolist()
    torch.cuda.synchronize()
    ready = time.perf_counter()

    import dglu

    imported = time.perf_counter()
    dglu.grouped_gemm_dglu_wrapper_sm90(**wrapper_arguments(buffers))
    torch.cuda.synchronize()
    first = time.perf_counter()
    dglu.grouped_gemm_dglu_wrapper_sm90(**wrapper_arguments(buffers))
    torch.cuda.synchronize()
    second = time.perf_counter()
    milliseconds = {
        "torch_import_ms": torch_imported - start,
        "torch_ready_ms": ready - torch_imported,
        "dglu_import_ms": imported - ready,
        "first_call_ms": first - imported,
        "second_call_ms": second - first,
    }
    print(json.dumps({name: 1e3 * seconds for name, seconds in milliseconds.items()}))


if __name__ == "__main__":
    main()
