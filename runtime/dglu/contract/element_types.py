"""Element types by their manifest names: byte size, torch dtype name, TMA data type and
CuTe DSL type. The one table both sides read: the manifest's reader, the build (its kernels'
sizes and CuTe DSL types: dglu_build.kernels.dtypes) and the runtime. Library types are
named by strings, so that the contract imports the standard library alone."""

from __future__ import annotations

from .records import Record


class ElementType(Record):
    """One element type as the manifest names it (e.g. "bf16")."""

    name: str
    size: int
    torch_name: str
    tensor_map_type: str  # member name of cuda.bindings.driver.CUtensorMapDataType
    cutlass_type: str  # attribute name of the CuTe DSL's ``cutlass`` module (the build's kernels)

    @property
    def bits(self) -> int:
        """The element's size in bits (as the kernels' tile and swizzle arithmetic counts)."""
        return 8 * self.size


ELEMENT_TYPES: dict[str, ElementType] = {
    e.name: e
    for e in (
        ElementType("bf16", 2, "bfloat16", "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "BFloat16"),
        ElementType("fp16", 2, "float16", "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", "Float16"),
        ElementType("fp32", 4, "float32", "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", "Float32"),
        ElementType("i32", 4, "int32", "CU_TENSOR_MAP_DATA_TYPE_INT32", "Int32"),
        ElementType("i64", 8, "int64", "CU_TENSOR_MAP_DATA_TYPE_INT64", "Int64"),
        ElementType("e4m3", 1, "float8_e4m3fn", "CU_TENSOR_MAP_DATA_TYPE_UINT8", "Float8E4M3FN"),
        ElementType("e5m2", 1, "float8_e5m2", "CU_TENSOR_MAP_DATA_TYPE_UINT8", "Float8E5M2"),
        ElementType("e8m0", 1, "float8_e8m0fnu", "CU_TENSOR_MAP_DATA_TYPE_UINT8", "Float8E8M0FNU"),
        # Blackwell block-scaled (sm100_blockscaled): FP4 operands stored two values a byte
        # (cuDNN FE's kernel takes them as its 4-bit type), and the unsigned items its
        # scale-factor TMA descriptors move (whole 512-byte atoms)
        ElementType("e2m1x2", 1, "float4_e2m1fn_x2", "CU_TENSOR_MAP_DATA_TYPE_UINT8", "Float4E2M1FN"),
        ElementType("u16", 2, "uint16", "CU_TENSOR_MAP_DATA_TYPE_UINT16", "Uint16"),
        ElementType("u64", 8, "uint64", "CU_TENSOR_MAP_DATA_TYPE_UINT64", "Uint64"),
    )
}

FLOAT_TYPES = ("bf16", "fp16", "fp32")
FP8_TYPES = ("e4m3", "e5m2")  # MXFP8 operands, C and D
