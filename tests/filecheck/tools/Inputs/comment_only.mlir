// Used by stdin.mlir and other_inputs.mlir: no operations at all.

