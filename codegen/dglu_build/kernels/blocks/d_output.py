"""The dGLU epilogue's output stage: how D leaves the registers, an object a family passes
to the kernel (sm90_bf16's ping-pong consumer) so that another family can replace it
(e.g. to quantize D in the epilogue)."""

import cutlass.cute as cute


class DPairStore:
    """D as the D dtype: two adjacent columns of a row (the accumulator fragment's column
    pair) of the gate and of the input half of an epilogue group, converted and written
    into the epilogue's shared-memory slot (over the C they were computed from), from
    where the block mover stores them by TMA."""

    def __init__(self, d_dtype):
        self.d_dtype = d_dtype

    @cute.jit
    def store_pairs(self, ring_d: cute.Tensor, gate_at, input_at, scaled, d_gate, d_input):
        """Write ``scaled[e]`` times the activation's gradients ``d_gate[e]`` and ``d_input[e]``
        (e = 0, 1) at elements ``gate_at + e`` and ``input_at + e`` of ``ring_d`` (a flat
        view of the slot ring in D's dtype; each pair in one 16-byte chunk, so the two
        stores may merge); returns the values as stored (the dbias sums add those)."""
        gates = [(scaled[e] * d_gate[e]).to(self.d_dtype) for e in range(2)]
        inputs = [(scaled[e] * d_input[e]).to(self.d_dtype) for e in range(2)]
        ring_d[gate_at] = gates[0]
        ring_d[gate_at + 1] = gates[1]
        ring_d[input_at] = inputs[0]
        ring_d[input_at + 1] = inputs[1]
        return gates, inputs
