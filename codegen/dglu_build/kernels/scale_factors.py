"""The seed's block scale-factor tensors as manifest ARGUMENTs, shared by the block-scaled
families (sm90_mxfp8, sm100_blockscaled), in pure Python.

A scale-factor tensor (SFA, SFB, SFD_row, SFD_col) has the seed's logical shape
(32, 4, ceil(rows/128), 4, ceil(ceil(cols/sf_vec_size)/4), L) and the strides of its
permuted allocation: 512-byte atoms of 128 rows x 4 blocks (docs/blockscaled_contract.md).
"""

from __future__ import annotations

SF_ATOM_BYTES = 512  # one atom: 128 rows x 4 blocks
SF_ALLOCATION = (
    "the seed's permuted scale-factor allocation: a contiguous (L, ceil(rows/128), "
    "ceil(Kc/128), 32, 4, 4) tensor of the scale dtype permuted by (3, 4, 1, 5, 2, 0)"
)


def scale_factor_argument(row_atoms: str, col_atoms: str, l: str | int, pitch: str, size: str, io: str,
                          dtype: str = "e8m0", align: int = 1) -> dict:
    """A scale-factor ARGUMENT: ``row_atoms`` x ``col_atoms`` atoms (EXPRESSIONs), ``pitch``
    bytes per 128 rows, ``size`` bytes per expert, of the scale ``dtype`` (one byte), its
    address a multiple of ``align``."""
    return {"shape": [32, 4, row_atoms, 4, col_atoms, l], "strides": [16, 4, pitch, 1, SF_ATOM_BYTES, size],
            "dtypes": [dtype], "io": io, "align": align, "allocation": SF_ALLOCATION}
