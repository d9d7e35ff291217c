// A whole tiny LLaMA-style model as one function (embedding, one decoder layer with GQA
// attention, final norm, LM head, cross-entropy), written as Hugging Face computes it:
// separate q/k/v and gate/up projections, silu(gate) * up. Odd sizes: 2 sequences of 5
// tokens, hidden 48, q heads 4 / kv heads 2 of 16, ffn 40, vocabulary 37.
func.func @tiny_model(%ids: tensor<10xi32>, %pos: tensor<10xi32>, %targets: tensor<10xi32>, %w_emb: tensor<37x48xf32>,
                      %wn_in: tensor<48xf32>, %wq: tensor<64x48xf32>, %wk: tensor<32x48xf32>, %wv: tensor<32x48xf32>,
                      %wo: tensor<48x64xf32>, %wn_post: tensor<48xf32>, %wg: tensor<40x48xf32>, %wu: tensor<40x48xf32>,
                      %wd: tensor<48x40xf32>, %wn_f: tensor<48xf32>, %w_lm: tensor<37x48xf32>) -> tensor<f32> {
  %x = "nn.embedding"(%ids, %w_emb) : (tensor<10xi32>, tensor<37x48xf32>) -> tensor<10x48xf32>
  %h = "nn.rms_norm"(%x, %wn_in) <{eps = 1.0e-06 : f32}> : (tensor<10x48xf32>, tensor<48xf32>) -> tensor<10x48xf32>
  %q = "nn.linear"(%h, %wq) : (tensor<10x48xf32>, tensor<64x48xf32>) -> tensor<10x64xf32>
  %k = "nn.linear"(%h, %wk) : (tensor<10x48xf32>, tensor<32x48xf32>) -> tensor<10x32xf32>
  %v = "nn.linear"(%h, %wv) : (tensor<10x48xf32>, tensor<32x48xf32>) -> tensor<10x32xf32>
  %qkv = "nn.concat"(%q, %k, %v) <{axis = 1 : i64}> : (tensor<10x64xf32>, tensor<10x32xf32>, tensor<10x32xf32>) -> tensor<10x128xf32>
  %r = "nn.rope"(%qkv, %pos) <{head_dim = 16 : i64, rotary_heads = 6 : i64, theta = 10000.0 : f32, style = "half"}> : (tensor<10x128xf32>, tensor<10xi32>) -> tensor<10x128xf32>
  %y = "nn.attention"(%r) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true}> : (tensor<10x128xf32>) -> tensor<10x64xf32>
  %a = "nn.linear"(%y, %wo) : (tensor<10x64xf32>, tensor<48x64xf32>) -> tensor<10x48xf32>
  %x1 = "nn.add"(%x, %a) : (tensor<10x48xf32>, tensor<10x48xf32>) -> tensor<10x48xf32>
  %h1 = "nn.rms_norm"(%x1, %wn_post) <{eps = 1.0e-06 : f32}> : (tensor<10x48xf32>, tensor<48xf32>) -> tensor<10x48xf32>
  %g = "nn.linear"(%h1, %wg) : (tensor<10x48xf32>, tensor<40x48xf32>) -> tensor<10x40xf32>
  %u = "nn.linear"(%h1, %wu) : (tensor<10x48xf32>, tensor<40x48xf32>) -> tensor<10x40xf32>
  %s = "nn.silu"(%g) : (tensor<10x40xf32>) -> tensor<10x40xf32>
  %m = "nn.mul"(%s, %u) : (tensor<10x40xf32>, tensor<10x40xf32>) -> tensor<10x40xf32>
  %dn = "nn.linear"(%m, %wd) : (tensor<10x40xf32>, tensor<48x40xf32>) -> tensor<10x48xf32>
  %x2 = "nn.add"(%x1, %dn) : (tensor<10x48xf32>, tensor<10x48xf32>) -> tensor<10x48xf32>
  %hf = "nn.rms_norm"(%x2, %wn_f) <{eps = 1.0e-06 : f32}> : (tensor<10x48xf32>, tensor<48xf32>) -> tensor<10x48xf32>
  %logits = "nn.linear"(%hf, %w_lm) : (tensor<10x48xf32>, tensor<37x48xf32>) -> tensor<10x37xf32>
  %loss = "nn.cross_entropy"(%logits, %targets) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<10x37xf32>, tensor<10xi32>) -> tensor<f32>
  func.return %loss : tensor<f32>
}
