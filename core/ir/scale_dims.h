// A module's dimensions scaled by k: the same program at k times its sizes, for simulating a module
// at real size while the numerical check runs on the small one (the whole-model issue's "scale this
// module's dims by k", for a module the zoo did not build); or shrunk (ScaleDimsOptions::shrink),
// for checking a large module's sharding numerically on a small twin.
//
// What scales: every dimension of the entry parameters at least `min_dim` long, and whatever
// follows from them. The module's dimensions are first grouped into classes that must stay equal
// (an add's operands and result, a dot's contracting dimensions, a transpose's permuted ones, a
// while loop's state and its body's parameter and root, a call's operands and the callee's
// parameters, ...). Each instruction's shape is then recomputed in order by the shape inference the
// verifier uses, from its operands' new shapes; the few ops whose result shape is written rather
// than inferred get a rule: a reshape multiplies each group of dimensions it merges or splits by
// what its input group was multiplied by (a split gives it to its major dimension unless its
// dimensions' classes say otherwise); a slice or dynamic-slice scales its bounds with the dimension
// it cuts; a broadcast's new dimensions, an iota's and an rng's take their class's size, or are
// scaled like a parameter's when nothing fixes them. Kept as they are: a constant's dimensions (its
// data is written out), a convolution kernel's spatial dimensions and every window, dimensions
// shorter than `min_dim`. Shardings stay on their instructions (a dimension split t ways is still
// split t ways, k times longer).
//
// A gather's or scatter's index vector keeps its length (one entry per indexed dimension) and its
// batch and whole-window dimensions follow the indices' and the operand's; a grouped (depthwise)
// convolution keeps its kernel's per-group features and takes the group count that follows; a
// custom-call whose result is its one operand's shape (Sharding, ShardBarrierFrom, ...) scales with
// it. An op the rules do not cover (a collective, an infeed, a custom-call with a result of its
// own, ...) is an error naming the instruction. A dimension that two rules size differently keeps
// its size on another attempt (every conflict of an attempt is recorded before the next); the
// result is always checked by the verifier before it is returned. Of XLA's 618 conformance
// modules, 555 scale by 2 (tests/test_scale_dims.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"

namespace shardscope {

struct ScaleDimsOptions {
  int64_t min_dim = 2;  // entry-parameter dimensions shorter than this keep their size
  // Factors for single dimensions instead of k, by entry parameter and dimension ("x:0" -> 8: the
  // batch of x, and every dimension of its class, x8). Members of one class (EntryParameterDimension
  // Classes) must not be given different factors; 1 keeps a dimension as it is.
  std::map<std::string, int64_t, std::less<>> factors;
  // The other way (with k = 1): every class takes the smallest size that divides its own, keeps
  // each tiled sharding of its dimensions even (a multiple of the tiles that split it) and is at
  // least `min_dim` long (a class already shorter keeps its size, as does one a sharding splits
  // unevenly). A cut that cannot shrink with its dimension keeps that dimension's size on another
  // attempt. A small twin of any module, for checking its sharding numerically where the module
  // itself is too large (app/pipeline/small_twin.h, ShrunkTwin).
  bool shrink = false;
};

// The entry parameters' dimensions grouped by what must stay equal (the classes the scaling works
// on): "x:0" and "labels:0" are one class when the batch of x meets the labels' in an op. In the
// order of the parameters; each class's dimensions by parameter number.
struct DimensionClass {
  int64_t size = 0;
  std::vector<std::string> dims;  // "param:dim"
  bool fixed = false;             // a constant's or a window's: kept whatever the factor
};
Result<std::vector<DimensionClass>> EntryParameterDimensionClasses(const Module& module);

struct ScaledModule {
  std::unique_ptr<Module> module;
  int64_t scaled_parameter_dims = 0;  // entry-parameter dimensions that were multiplied
  int64_t kept_parameter_dims = 0;    // ... that kept their size (short, or fixed by a constant/window)
  // Why dimensions that would have scaled kept their size: each conflict that made an attempt keep
  // more of them ("forward_body/%shift: dimension 0 would be 4 long, but ..."), in order.
  std::vector<std::string> kept_because;
  int attempts = 1;  // each attempt finds every conflict it meets; the next keeps those dimensions
};

// The module with its dimensions multiplied by `k` (>= 1) as described above.
Result<ScaledModule> ScaleModuleDims(const Module& module, int64_t k, const ScaleDimsOptions& options = {});

}  // namespace shardscope
