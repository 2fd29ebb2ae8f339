"""The dGLU epilogue's output stage: how D leaves the registers, an object a family passes
to the kernel (sm90_bf16's ping-pong consumer) so that another family can replace it
(e.g. to quantize D in the epilogue)."""

import cutlass.cute as cute


class DPairStore:
    """D as the D dtype: one gate/input pair of a row, converted and written into the
    epilogue's shared-memory slot (over the C it was computed from), from where the
    block mover stores it by TMA."""

    def __init__(self, d_dtype):
        self.d_dtype = d_dtype

    @cute.jit
    def store_pair(self, ring_d: cute.Tensor, gate_at, input_at, scaled, d_gate, d_input):
        """Write ``scaled`` times the activation's two gradients at elements ``gate_at`` and
        ``input_at`` of ``ring_d`` (a flat view of the slot ring in D's dtype); returns the
        two values as stored (the dbias sums add those)."""
        d_gate_out = (scaled * d_gate).to(self.d_dtype)
        d_input_out = (scaled * d_input).to(self.d_dtype)
        ring_d[gate_at] = d_gate_out
        ring_d[input_at] = d_input_out
        return d_gate_out, d_input_out
