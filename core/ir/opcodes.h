// The HLO op set, one X-macro so names, enums and classification stay in one place.
#pragma once

#include <optional>
#include <string_view>

namespace shardscope {

// V(enum, "hlo-text-name")
#define SHARDSCOPE_OPCODES(V)                                              \
  V(kAbs, "abs") V(kAdd, "add") V(kAfterAll, "after-all")                   \
  V(kAllGather, "all-gather") V(kAllGatherStart, "all-gather-start")        \
  V(kAllGatherDone, "all-gather-done") V(kAllReduce, "all-reduce")          \
  V(kAllReduceStart, "all-reduce-start") V(kAllReduceDone, "all-reduce-done") \
  V(kAllToAll, "all-to-all") V(kAnd, "and") V(kAtan2, "atan2")              \
  V(kBitcast, "bitcast") V(kBitcastConvert, "bitcast-convert")              \
  V(kBroadcast, "broadcast") V(kCall, "call") V(kCbrt, "cbrt") V(kCeil, "ceil") \
  V(kClamp, "clamp") V(kClz, "count-leading-zeros")                         \
  V(kCollectivePermute, "collective-permute")                               \
  V(kCollectivePermuteStart, "collective-permute-start")                    \
  V(kCollectivePermuteDone, "collective-permute-done")                      \
  V(kCompare, "compare") V(kComplex, "complex") V(kConcatenate, "concatenate") \
  V(kConditional, "conditional") V(kConstant, "constant") V(kConvert, "convert") \
  V(kConvolution, "convolution") V(kCopy, "copy") V(kCopyStart, "copy-start") \
  V(kCopyDone, "copy-done") V(kCos, "cosine") V(kCustomCall, "custom-call") \
  V(kDivide, "divide") V(kDomain, "domain") V(kDot, "dot")                  \
  V(kDynamicSlice, "dynamic-slice") V(kDynamicUpdateSlice, "dynamic-update-slice") \
  V(kErf, "erf") V(kExp, "exponential") V(kExpm1, "exponential-minus-one")  \
  V(kFloor, "floor") V(kGather, "gather") V(kGetTupleElement, "get-tuple-element") \
  V(kImag, "imag") V(kInfeed, "infeed") V(kIota, "iota") V(kIsFinite, "is-finite") \
  V(kLog, "log") V(kLog1p, "log-plus-one") V(kLogistic, "logistic") V(kMap, "map") \
  V(kMaximum, "maximum") V(kMinimum, "minimum") V(kMultiply, "multiply")    \
  V(kNegate, "negate") V(kNot, "not") V(kOptimizationBarrier, "opt-barrier") \
  V(kOr, "or") V(kOutfeed, "outfeed") V(kPad, "pad") V(kParameter, "parameter") \
  V(kPartitionId, "partition-id") V(kPopcnt, "popcnt") V(kPower, "power")   \
  V(kReal, "real") V(kRecv, "recv") V(kRecvDone, "recv-done") V(kReduce, "reduce") \
  V(kReducePrecision, "reduce-precision") V(kReduceScatter, "reduce-scatter") \
  V(kReduceWindow, "reduce-window") V(kRemainder, "remainder")              \
  V(kReplicaId, "replica-id") V(kReshape, "reshape") V(kReverse, "reverse") \
  V(kRng, "rng") V(kRoundNearestAfz, "round-nearest-afz")                   \
  V(kRoundNearestEven, "round-nearest-even") V(kRsqrt, "rsqrt")             \
  V(kScatter, "scatter") V(kSelect, "select") V(kSelectAndScatter, "select-and-scatter") \
  V(kSend, "send") V(kSendDone, "send-done") V(kShiftLeft, "shift-left")    \
  V(kShiftRightArithmetic, "shift-right-arithmetic")                        \
  V(kShiftRightLogical, "shift-right-logical") V(kSign, "sign") V(kSin, "sine") \
  V(kSlice, "slice") V(kSort, "sort") V(kSqrt, "sqrt") V(kSubtract, "subtract") \
  V(kTan, "tan") V(kTanh, "tanh") V(kTranspose, "transpose") V(kTuple, "tuple") \
  V(kWhile, "while") V(kXor, "xor") V(kGetDimensionSize, "get-dimension-size") \
  V(kSetDimensionSize, "set-dimension-size") V(kStochasticConvert, "stochastic-convert") \
  /* Any other opcode text (fft, cholesky, triangular-solve, ragged-dot, rng-bit-generator, ...)   \
     parses into kGeneric with its name kept in Instruction::opcode_text. */ \
  V(kGeneric, "<generic>")

enum class Opcode : uint16_t {
#define SHARDSCOPE_OPCODE_ENUM(e, s) e,
  SHARDSCOPE_OPCODES(SHARDSCOPE_OPCODE_ENUM)
#undef SHARDSCOPE_OPCODE_ENUM
};

std::string_view OpcodeName(Opcode op);
// Recognises XLA's spellings (also "sin"/"cos"/"opt-barrier"/"optimization-barrier"); nullopt for
// anything else (the parser then makes a kGeneric instruction).
std::optional<Opcode> OpcodeFromName(std::string_view name);

bool IsElementwiseUnary(Opcode op);
bool IsElementwiseBinary(Opcode op);
// Elementwise in XLA's sense: unary, binary, select, clamp, convert, compare, ...
bool IsElementwise(Opcode op);
bool IsCollective(Opcode op);  // all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute (+start/done)

}  // namespace shardscope
