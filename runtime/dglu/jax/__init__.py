"""JAX entry points of dglu (filled in below)."""
