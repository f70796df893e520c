// Subcommands of the `seqgrad` tool; tools/seqgrad.cpp dispatches to them. Each is called like a
// main(): argv[0] names the subcommand and its arguments follow; it returns the exit status.
#pragma once

// seqgrad gradcheck [OP ...] [--list] [--help]: float64 gradient checks of the op table's rows.
int gradcheck_main(int argc, char** argv);
// seqgrad attention demo [--kind KIND] [--seed N]: each attention kind's energies, weights and
// contexts on a tiny fixed toy input (tools/cmd_attention_demo.cpp).
int attention_demo_main(int argc, char** argv);

namespace seqgrad::tools {
int train_main(int argc, char** argv);
int translate_main(int argc, char** argv);
int eval_main(int argc, char** argv);
int attention_main(int argc, char** argv);
// seqgrad compare: trains each attention kind on the same data and seed (tools/cmd_compare.cpp).
int compare_main(int argc, char** argv);
// seqgrad bench [WORKLOAD ...]: timed workloads, compared with PyTorch by bench/run.sh (tools/cmd_bench.cpp).
int bench_main(int argc, char** argv);
// seqgrad export: a checkpoint as ONNX graphs for onnxruntime and other runtimes (tools/cmd_export.cpp).
int export_main(int argc, char** argv);
// seqgrad quantize --checkpoint IN --out OUT [--per-tensor]: int8 dynamic quantization (tools/cmd_quantize.cpp).
int quantize_main(int argc, char** argv);
// seqgrad average --out-file F CKPT...: the mean of checkpoints' weights (tools/cmd_average.cpp).
int average_main(int argc, char** argv);
// seqgrad serve --checkpoint F [--port N]: translations over HTTP and the attention explorer (tools/cmd_serve.cpp).
int serve_main(int argc, char** argv);
// seqgrad inspect CHECKPOINT: what a translator checkpoint holds (tools/cmd_inspect.cpp).
int inspect_main(int argc, char** argv);
}  // namespace seqgrad::tools
