// The ONNX exporter in a build without libonnx (meson option onnx): every call says so.
#include "tools/export/onnx_export.h"

namespace seqgrad::tools::onnx {

bool onnx_available() { return false; }

Graphs export_graphs(const models::TranslationModel&, const ExportOptions&) {
  throw Error(kNoOnnxSupport);
}

}  // namespace seqgrad::tools::onnx
