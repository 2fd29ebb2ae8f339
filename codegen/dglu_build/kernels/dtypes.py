"""The CuTe DSL types of the element types (dglu.contract.element_types, which names each
one's ``cutlass`` type): the build side's one map from a manifest dtype name to the type
its kernels compile with. Imports CuTe DSL: compile-time modules only."""

import cutlass
from dglu.contract.element_types import ELEMENT_TYPES

DTYPES = {name: getattr(cutlass, element.cutlass_type) for name, element in ELEMENT_TYPES.items()}
