"""The `coda-opt` command-line driver (the CLI only; the base layer it uses is coda_ir.diagnostics, coda_ir.context, coda_ir.remarks)."""
