#include "core/zoo/annotations.h"

#include <cctype>

namespace shardscope {

// ---- names -----------------------------------------------------------------------------------------------

std::string_view AnnotationSetName(AnnotationSet s) {
  switch (s) {
    case AnnotationSet::kNone: return "none";
    case AnnotationSet::kAttempt1: return "attempt1";
    case AnnotationSet::kAttempt2: return "attempt2";
    case AnnotationSet::kFinalized: return "finalized";
    case AnnotationSet::kDataParallel: return "data-parallel";
  }
  return "none";
}

std::optional<AnnotationSet> AnnotationSetFromName(std::string_view s) {
  std::string k;
  for (char c : s)
    if (c != '-' && c != '_' && c != ' ') k += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (k.rfind("2d", 0) == 0) k = k.substr(2);
  if (k == "none" || k.empty()) return AnnotationSet::kNone;
  if (k == "attempt1") return AnnotationSet::kAttempt1;
  if (k == "attempt2") return AnnotationSet::kAttempt2;
  if (k == "finalized" || k == "final") return AnnotationSet::kFinalized;
  if (k == "dataparallel" || k == "dp") return AnnotationSet::kDataParallel;
  return std::nullopt;
}

std::string_view Table1TensorName(Table1Tensor t) {
  switch (t) {
    case Table1Tensor::kWqkv: return "W_Q/W_K/W_V (MND)";
    case Table1Tensor::kWo: return "W_O (NDM)";
    case Table1Tensor::kWin: return "W_in (MH)";
    case Table1Tensor::kWout: return "W_out (HM)";
    case Table1Tensor::kBSM: return "BSM";
    case Table1Tensor::kBSND: return "BSND";
    case Table1Tensor::kBSH: return "BSH";
  }
  return "";
}

// GSPMD Table 1 ("Dense Transformer sharding annotations"), X = mesh axis 0, Y = mesh axis 1:
//                 MND     NDM     MH   HM   BSM     BSND      BSH
//   2D Attempt 1  X,Y,_   Y,_,X   X,Y  Y,X  _,_,X   _,_,Y,_   _,_,Y
//   2D Attempt 2  X,Y,_   Y,_,X   X,Y  Y,X  X,_,_   X,_,Y,_   X,_,Y
//   2D finalized  X,Y,_   Y,_,X   X,Y  Y,X  X,_,Y   X,_,Y,_   X,_,Y
std::vector<int64_t> Table1DimsMapping(AnnotationSet set, Table1Tensor tensor) {
  constexpr int64_t X = 0, Y = 1, _ = -1, B = kEveryMeshAxis;
  if (set == AnnotationSet::kNone) return {};
  if (set == AnnotationSet::kDataParallel) {
    switch (tensor) {
      case Table1Tensor::kWqkv: case Table1Tensor::kWo: return {_, _, _};
      case Table1Tensor::kWin: case Table1Tensor::kWout: return {_, _};
      case Table1Tensor::kBSM: case Table1Tensor::kBSH: return {B, _, _};
      case Table1Tensor::kBSND: return {B, _, _, _};
    }
  }
  switch (tensor) {
    case Table1Tensor::kWqkv: return {X, Y, _};
    case Table1Tensor::kWo: return {Y, _, X};
    case Table1Tensor::kWin: return {X, Y};
    case Table1Tensor::kWout: return {Y, X};
    case Table1Tensor::kBSM:
      if (set == AnnotationSet::kAttempt1) return {_, _, X};
      if (set == AnnotationSet::kAttempt2) return {X, _, _};
      return {X, _, Y};
    case Table1Tensor::kBSND:
      if (set == AnnotationSet::kAttempt1) return {_, _, Y, _};
      return {X, _, Y, _};
    case Table1Tensor::kBSH:
      if (set == AnnotationSet::kAttempt1) return {_, _, Y};
      return {X, _, Y};
  }
  return {};
}

std::vector<int64_t> VocabularyDimsMapping(AnnotationSet set, VocabularyTensor tensor) {
  constexpr int64_t X = 0, Y = 1, _ = -1, B = kEveryMeshAxis;
  if (set == AnnotationSet::kNone) return {};
  if (set == AnnotationSet::kDataParallel) {
    if (tensor == VocabularyTensor::kBSV) return {B, _, _};
    return {_, _};
  }
  switch (tensor) {
    case VocabularyTensor::kEmbedding: return {Y, X};
    case VocabularyTensor::kSoftmaxWeight: return {X, Y};
    case VocabularyTensor::kBSV: return {X, _, Y};
  }
  return {};
}

AnnotationSet ReadAnnotationSet(ZooParams& p) {
  auto s = AnnotationSetFromName(p.Str("annotations"));
  if (!s)
    p.Fail("parameter annotations must be none, attempt1, attempt2, finalized or data-parallel, found '" + p.Str("annotations") + "'");
  return s.value_or(AnnotationSet::kNone);
}

std::string_view ImageAnnotationsName(ImageAnnotations a) {
  switch (a) {
    case ImageAnnotations::kNone: return "none";
    case ImageAnnotations::kData: return "data";
    case ImageAnnotations::kSpatial: return "spatial";
  }
  return "none";
}

ImageAnnotations ReadImageAnnotations(ZooParams& p) {
  const std::string s = p.Choice("annotations", {"none", "data", "spatial"});
  if (s == "data") return ImageAnnotations::kData;
  if (s == "spatial") return ImageAnnotations::kSpatial;
  return ImageAnnotations::kNone;
}

std::vector<int64_t> ImageInputMapping(ImageAnnotations a, int64_t rank) {
  if (a == ImageAnnotations::kNone || rank < 2) return {};
  std::vector<int64_t> m(static_cast<size_t>(rank), -1);
  m[0] = 0;                                          // batch on X
  if (a == ImageAnnotations::kSpatial) m[1] = 1;     // first spatial dim on Y
  return m;
}

}  // namespace shardscope
