// Shardy's round-trip attributes in an HLO module, read into the IR. JAX with Shardy writes its
// shardings as frontend attributes next to (or instead of) XLA's sharding=, and its manual
// computations (shard_map) as custom-calls:
//
//   header:   frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["data"=2, "model"=4]>}}
//   value:    frontend_attributes={xla.sdy.sharding="#sdy.sharding<@mesh, [{\"data\"}, {}]>"}
//   manual:   t = (local shapes) custom-call(args), custom_call_target="xla.sdy.GlobalToLocalShape",
//                 frontend_attributes={xla.sdy.in_shardings=..., xla.sdy.manual_axes=...}
//             r = call(get-tuple-element(t)...), to_apply=%xla.sdy.manual_computation_body
//             g = custom-call(r), custom_call_target="xla.sdy.LocalToGlobalShape",
//                 frontend_attributes={xla.sdy.out_shardings=..., xla.sdy.manual_axes=...}
//   result:   custom-call(x), custom_call_target="xla.sdy.FuncResultSharding", xla.sdy.sharding=...
//
// ImportShardy (run by the parser) does what XLA's import from Shardy does for GSPMD:
//  - Module::sdy_meshes gets the meshes, with the user's axis names;
//  - an instruction with xla.sdy.sharding and no sharding= gets that sharding; where both are
//    given they must agree (a disagreement is reported; sharding= is kept);
//  - a manual computation becomes GSPMD's manual region: per operand custom-call "Sharding"
//    (in-sharding) then "SPMDFullToShardShape" ({manual}, or a manual subgroup when only some
//    axes are manual); per result "Sharding" (manual) then "SPMDShardToFullShape" (out-sharding);
//  - xla.sdy.FuncResultSharding becomes the "Sharding" annotation it stands for.
// Frontend attributes are kept verbatim. A malformed Shardy attribute is reported and ignored.
#pragma once

#include <string>
#include <vector>

#include "core/ir/ir.h"

namespace shardscope {

struct ShardyDiagnostic {
  int64_t instruction_id = -1;  // the instruction the message is about (-1: the module header)
  std::string message;          // "instruction 'x': ..." 
};

std::vector<ShardyDiagnostic> ImportShardy(Module& module);

}  // namespace shardscope
