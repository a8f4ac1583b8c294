// Real XLA dumps open as they are (docs/real-dumps.md): the constructs that JAX, PyTorch/XLA and
// TensorFlow write with --xla_dump_to, each in a module built here the way those dumps write it
// (the dumps themselves are not copied into the repository). For every construct: it parses with
// the verifier on, what the IR models is modelled (source locations, fusion kinds, async pairs,
// Shardy meshes and shardings, manual regions), the rest is kept verbatim, and the module round
// trips. Also: the "already partitioned" rule, the dump pipeline report, and the CLI views.
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <sstream>
#include <string>

#include "app/conformance/dump_conformance.h"
#include "core/ir/hlo_text.h"
#include "core/ir/spmd_program.h"
#include "core/sharding/shardy.h"
#include "partitioner/propagation/sharding_propagation.h"
#include "partitioner/spmd/spmd_partitioner.h"
#include "tests/built_paths.h"

using namespace shardscope;

namespace {

struct Parsed {
  std::unique_ptr<Module> module;
  std::vector<std::string> warnings;
  std::string error;
};

Parsed ParseWithWarnings(std::string_view text) {
  Parsed p;
  ParseOptions o;
  o.warnings = &p.warnings;
  auto r = ParseHloModule(text, "dump.hlo", o);
  if (r.ok()) p.module = std::move(r).value();
  else p.error = r.error().message;
  return p;
}

std::unique_ptr<Module> ParseOk(std::string_view text) {
  Parsed p = ParseWithWarnings(text);
  if (!p.module) qWarning("%s", p.error.c_str());
  return std::move(p.module);
}

// parse -> print -> parse gives an equal module and the printed text is a fixpoint.
bool RoundTrips(const Module& m, std::string* why) {
  const std::string printed = PrintHloModule(m);
  auto again = ParseHloModule(printed, "printed.hlo");
  if (!again.ok()) {
    *why = again.error().message + "\n" + printed;
    return false;
  }
  if (!ModulesEqual(m, **again, why)) return false;
  if (PrintHloModule(**again) != printed) {
    *why = "not a fixpoint";
    return false;
  }
  return true;
}

#define CHECK_ROUND_TRIP(m)                                   \
  do {                                                        \
    std::string why_;                                         \
    QVERIFY2(RoundTrips(*(m), &why_), why_.c_str());          \
  } while (0)

const Instruction* Find(const Module& m, std::string_view name) {
  const Instruction* i = m.FindInstruction(name);
  if (!i) qWarning("no instruction %s", std::string(name).c_str());
  return i;
}

// A jitted function as a current JAX writes it: header attributes, the four stack-frame tables,
// metadata with stack_frame_id, a computation without signature.
constexpr const char* kStackFrames = R"(HloModule jit_step, is_scheduled=false, entry_computation_layout={(f32[4,8]{1,0})->f32[4,8]{1,0}}, allow_spmd_sharding_propagation_to_parameters={true}, allow_spmd_sharding_propagation_to_output={true}

FileNames
1 "/home/user/train.py"
2 "/home/user/model/layers.py"

FunctionNames
1 "<module>"
2 "train_step"
3 "mlp_block"

FileLocations
1 {file_name_id=1 function_name_id=1 line=90 end_line=90 column=0 end_column=22}
2 {file_name_id=1 function_name_id=2 line=41 end_line=42 column=10 end_column=31}
3 {file_name_id=2 function_name_id=3 line=17 end_line=17 column=8 end_column=28}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}
3 {file_location_id=3 parent_frame_id=3}


ENTRY main.4 {
  x.1 = f32[4,8]{1,0} parameter(0), metadata={op_name="x"}
  tanh.2 = f32[4,8]{1,0} tanh(x.1), metadata={op_type="tanh" op_name="jit(step)/tanh" stack_frame_id=3 scheduling_name="tanh.2"}
  ROOT add.3 = f32[4,8]{1,0} add(tanh.2, x.1), metadata={op_name="jit(step)/add" source_file="/home/user/old.py" source_line=7 stack_frame_id=2}
}
)";

// Module texts of the tests below (kept out of the test class for moc).
// moc mis-reads \" inside raw strings: the texts write it as \x22 and Dump() turns it back into
// \" (what the dumps contain).
std::string Dump(std::string text) {
  for (size_t at = text.find("\\x22"); at != std::string::npos; at = text.find("\\x22", at + 2))
    text.replace(at, 4, "\\\"");
  return text;
}

const std::string kText1 = Dump(R"(HloModule m

FileNames
1 "a.py"

FunctionNames
1 "f"

FileLocations
1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=1 end_column=2}
2 {file_name_id=9 function_name_id=9 line=5 end_line=5 column=1 end_column=2}

StackFrames
1 {file_location_id=1 parent_frame_id=3}
2 {file_location_id=2 parent_frame_id=2}

ENTRY e {
  p = f32[2] parameter(0), metadata={source_file="legacy.py" source_line=12}
  a = f32[2] negate(p), metadata={stack_frame_id=1}
  b = f32[2] negate(a), metadata={stack_frame_id=44}
  ROOT c = f32[2] negate(b), metadata={stack_frame_id=2}
}
)");
const std::string kText2 = Dump(R"(HloModule jit_f, is_scheduled=true, input_output_alias={ {0}: (0, {}, may-alias) }, entry_computation_layout={(f32[64]{0:T(256)}, f32[64]{0:T(256)})->f32[64]{0:T(256)}}, num_partitions=2, frontend_attributes={fingerprint_before_lhs="0f1e"}

%async_wrapped (p.0: f32[64]) -> f32[64] {
  %p.0 = f32[64]{0:T(256)} parameter(0)
  ROOT %sqrt.0 = f32[64]{0:T(256)} sqrt(%p.0)
}, execution_thread="host"

%fused_computation (param_0: f32[64], param_1: f32[64]) -> f32[64] {
  %param_0 = f32[64]{0:T(256)} parameter(0)
  %param_1 = f32[64]{0:T(256)} parameter(1)
  ROOT %multiply.0 = f32[64]{0:T(256)} multiply(%param_0, %param_1)
}

ENTRY %main.9_spmd (a: f32[64], b: f32[64]) -> f32[64] {
  %a = f32[64]{0:T(256)} parameter(0), sharding={devices=[2]<=[2]}
  %b = f32[64]{0:T(256)} parameter(1), sharding={devices=[2]<=[2]}
  %async-start = ((f32[64]{0:T(256)}), f32[64]{0:T(256)}, s32[]{:T(128)}) async-start(%a), async_execution_thread="host", calls=%async_wrapped
  %async-update = ((f32[64]{0:T(256)}), f32[64]{0:T(256)}, s32[]{:T(128)}) async-update(%async-start)
  %async-done = f32[64]{0:T(256)} async-done(%async-update)
  %copy-start = (f32[64]{0:T(256)S(1)}, f32[64]{0:T(256)}, u32[]{:S(2)}) copy-start(%b), cross_program_prefetch_index=0
  %copy-done = f32[64]{0:T(256)S(1)} copy-done(%copy-start)
  ROOT %fusion = f32[64]{0:T(256)} fusion(%async-done, %copy-done), kind=kOutput, calls=%fused_computation, backend_config={"flag_configs":[],"used_scoped_memory_configs":[]}
}
)");
const std::string kText3 = Dump(R"(HloModule m
%fc (p: f32[8]) -> f32[] {
  %p = f32[8] parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[] reduce(%p, %z), dimensions={0}, to_apply=%add
}
%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
ENTRY %e (a: f32[8]) -> f32[] {
  %a = f32[8] parameter(0)
  ROOT %f = f32[] fusion(%a), kind=)");
const std::string kText4 = Dump(R"(, calls=%fc, output_to_operand_aliasing={{}: (0, {})}
})");
const std::string kText5 = Dump(R"(HloModule pairs, num_partitions=4

%sum (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(%x, %y)
}

%wrapped_all_to_all (w: f32[4,8]) -> f32[4,8] {
  %w = f32[4,8] parameter(0)
  ROOT %a2a = f32[4,8] all-to-all(%w), channel_id=9, replica_groups={{0,1,2,3}}, dimensions={0}
}

ENTRY %main_spmd (p: f32[4,8], t: token[]) -> (f32[16,8], f32[4,8]) {
  %p = f32[4,8] parameter(0)
  %t = token[] parameter(1)
  %ag-start = (f32[4,8], f32[16,8]) all-gather-start(%p), channel_id=1, replica_groups=[1,4]<=[4], dimensions={0}, use_global_device_ids=true
  %ag-done = f32[16,8] all-gather-done(%ag-start)
  %ar-start = f32[4,8] all-reduce-start(%p), channel_id=2, replica_groups={{0,1},{2,3}}, to_apply=%sum, backend_config={"collective_backend_config":{"is_sync":false}}
  %ar-done = f32[4,8] all-reduce-done(%ar-start)
  %cp-start = (f32[4,8], f32[4,8], u32[], u32[]) collective-permute-start(%ar-done), channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  %cp-done = f32[4,8] collective-permute-done(%cp-start)
  %rs-start = ((f32[4,8]), f32[1,8]) reduce-scatter-start(%cp-done), channel_id=4, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=%sum
  %rs-done = f32[1,8] reduce-scatter-done(%rs-start)
  %a2a-start = ((f32[4,8]), f32[4,8]) async-start(%cp-done), calls=%wrapped_all_to_all
  %a2a-done = f32[4,8] async-done(%a2a-start)
  %send = (f32[4,8], u32[], token[]) send(%a2a-done, %t), channel_id=5, frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1},{1,2}}"}
  %send-done = token[] send-done(%send), channel_id=5
  %recv = (f32[4,8], u32[], token[]) recv(%t), channel_id=6
  %recv-done = (f32[4,8], token[]) recv-done(%recv), channel_id=6
  %got = f32[4,8] get-tuple-element(%recv-done), index=0
  ROOT %out = (f32[16,8], f32[4,8]) tuple(%ag-done, %got)
}
)");
const std::string kText6 = Dump(R"(HloModule kept, entry_computation_layout={(bf16[2,<=8]{1,0})->(bf16[2,<=8]{1,0})}, frontend_attributes={xla.sdy.use_tuple_args="t",nested={a={b="c"}}}

ENTRY %e (p: bf16[2,<=8]) -> (bf16[2,<=8]) {
  %p = bf16[2,<=8]{1,0} parameter(0), origin={{"p"}}, parameter_replication={false}
  %cc = bf16[2,<=8]{1,0} custom-call(%p), custom_call_target="my_kernel", operand_layout_constraints={bf16[2,<=8]{1,0}}, custom_call_has_side_effect=true, api_version=API_VERSION_STATUS_RETURNING, schedule=SCHEDULE_LATEST, backend_config="\000\002 \001\377x", frontend_attributes={_scheduling_group_id="3",kernel_metadata={}}, output_to_operand_aliasing={{}: (0, {})}, result_accuracy={tolerance={atol=0 rtol=0 ulps=1}}, statistics={visualizing_index=1,stat-index-0=42}
  %bare = bf16[2,<=8]{1,0} copy(%cc), backend_config=opaque_token
  ROOT %t = (bf16[2,<=8]{1,0}) tuple(%bare)
}
)");
const std::string kText7 = Dump(R"(HloModule SyncTensorsGraph.40, input_output_alias={ {0}: (2, {}, must-alias), {1}: (3, {}, may-alias) }, replica_count=8

%AddComputation.10 (x.11: f32[], y.12: f32[]) -> f32[] {
  %x.11 = f32[] parameter(0)
  %y.12 = f32[] parameter(1)
  ROOT %add.13 = f32[] add(f32[] %x.11, f32[] %y.12)
}

ENTRY %SyncTensorsGraph.40 (p0.1: f32[], p1.2: f32[16,4], p2.3: f32[4,3], p3.4: f32[3]) -> (f32[4,3], f32[3], f32[]) {
  %p1.2 = f32[16,4]{1,0} parameter(1), frontend_attributes={neff_input_names="input1"}, metadata={op_type="xla__device_data" op_name="xla__device_data" source_file="train.py" source_line=30}
  %p2.3 = f32[4,3]{1,0} parameter(2)
  %p3.4 = f32[3]{0} parameter(3)
  %p0.1 = f32[] parameter(0)
  %dot.5 = f32[16,3]{1,0} dot(f32[16,4]{1,0} %p1.2, f32[4,3]{1,0} %p2.3), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_type="aten__mm" op_name="aten__mm"}
  %constant.6 = f32[] constant(0)
  %reduce.7 = f32[3]{0} reduce(f32[16,3]{1,0} %dot.5, f32[] %constant.6), dimensions={0}, to_apply=%AddComputation.10
  %transpose.8 = f32[4,16]{0,1} transpose(f32[16,4]{1,0} %p1.2), dimensions={1,0}
  %dot.9 = f32[4,3]{1,0} dot(f32[4,16]{0,1} %transpose.8, f32[16,3]{1,0} %dot.5), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %all-reduce.14 = (f32[4,3]{1,0}, f32[3]{0}, f32[]) all-reduce(f32[4,3]{1,0} %dot.9, f32[3]{0} %reduce.7, f32[] %p0.1), replica_groups={}, constrain_layout=true, to_apply=%AddComputation.10, metadata={op_type="xla__cross_replica_sum" op_name="xla__cross_replica_sum"}
  %gte.15 = f32[4,3]{1,0} get-tuple-element((f32[4,3]{1,0}, f32[3]{0}, f32[]) %all-reduce.14), index=0
  %gte.16 = f32[3]{0} get-tuple-element((f32[4,3]{1,0}, f32[3]{0}, f32[]) %all-reduce.14), index=1
  %gte.17 = f32[] get-tuple-element((f32[4,3]{1,0}, f32[3]{0}, f32[]) %all-reduce.14), index=2
  %sub.18 = f32[4,3]{1,0} subtract(f32[4,3]{1,0} %p2.3, f32[4,3]{1,0} %gte.15)
  %sub.19 = f32[3]{0} subtract(f32[3]{0} %p3.4, f32[3]{0} %gte.16)
  ROOT %tuple.20 = (f32[4,3]{1,0}, f32[3]{0}, f32[]) tuple(f32[4,3]{1,0} %sub.18, f32[3]{0} %sub.19, f32[] %gte.17), frontend_attributes={neff_output_names="output0,output1,output2"}
}
)");
const std::string kText8 = Dump(R"(HloModule cluster_3126854451285311961__.31, entry_computation_layout={(f32[8]{0}, s32[]{:T(128)})->(f32[8]{0})}

%cond.10 (arg_tuple.11: (s32[], f32[8])) -> pred[] {
  %arg_tuple.11 = (s32[], f32[8]{0}) parameter(0)
  %get-tuple-element.12 = s32[] get-tuple-element((s32[], f32[8]{0}) %arg_tuple.11), index=0
  %constant.13 = s32[] constant(4)
  ROOT %less-than.14 = pred[] compare(s32[] %get-tuple-element.12, s32[] %constant.13), direction=LT, metadata={op_type="Less" op_name="while/Less"}
}

%body.15 (arg_tuple.16: (s32[], f32[8])) -> (s32[], f32[8]) {
  %arg_tuple.16 = (s32[], f32[8]{0}) parameter(0)
  %get-tuple-element.17 = s32[] get-tuple-element((s32[], f32[8]{0}) %arg_tuple.16), index=0
  %constant.18 = s32[] constant(1)
  %add.19 = s32[] add(s32[] %get-tuple-element.17, s32[] %constant.18)
  %get-tuple-element.20 = f32[8]{0} get-tuple-element((s32[], f32[8]{0}) %arg_tuple.16), index=1
  %multiply.21 = f32[8]{0} multiply(f32[8]{0} %get-tuple-element.20, f32[8]{0} %get-tuple-element.20), metadata={op_type="Mul" op_name="while/mul"}
  ROOT %tuple.22 = (s32[], f32[8]{0}) tuple(s32[] %add.19, f32[8]{0} %multiply.21)
}

ENTRY %cluster_3126854451285311961__.31 (arg0.1: f32[8], arg1.2: s32[]) -> (f32[8]) {
  %arg0.1 = f32[8]{0} parameter(0), parameter_replication={false}, metadata={op_name="XLA_Args"}
  %arg1.2 = s32[] parameter(1), metadata={op_name="XLA_Args"}
  %constant.3 = s32[] constant(0)
  %tuple.4 = (s32[], f32[8]{0}) tuple(s32[] %constant.3, f32[8]{0} %arg0.1)
  %while.23 = (s32[], f32[8]{0}) while((s32[], f32[8]{0}) %tuple.4), condition=%cond.10, body=%body.15, backend_config={"known_trip_count":{"n":"4"}}
  %get-tuple-element.24 = f32[8]{0} get-tuple-element((s32[], f32[8]{0}) %while.23), index=1
  ROOT %tuple.30 = (f32[8]{0}) tuple(f32[8]{0} %get-tuple-element.24), metadata={op_name="XLA_Retvals"}
}
)");
const std::string kText9 = Dump(R"({mesh = #sdy.mesh<["data"=2, "model"=4]>, rev = #sdy.mesh<["x"=2], device_ids=[1,0]>, maximal_mesh_0 = #sdy.mesh<[], device_ids=[3]>, empty_mesh = #sdy.mesh<[]>})");
const std::string kText10 = Dump(R"(#sdy.sharding<@mesh, [{"data"}, {"model"}]>)");
const std::string kText11 = Dump(R"(#sdy.sharding<@mesh, [{"model"}, {"data"}]>)");
const std::string kText12 = Dump(R"(#sdy.sharding<@mesh, [{"model", "data"}, {}]>)");
const std::string kText13 = Dump(R"(#sdy.sharding<@mesh, [{}, {"model", ?}p1]>)");
const std::string kText14 = Dump(R"(#sdy.sharding<@mesh, [{"model":(2)2}, {"data"}]>)");
const std::string kText15 = Dump(R"(#sdy.sharding<@rev, [{"x"}]>)");
const std::string kText16 = Dump(R"(#sdy.sharding<@maximal_mesh_0, []>)");
const std::string kText17 = Dump(R"(#sdy.sharding<@empty_mesh, [{}, {}]>)");
const std::string kText18 = Dump(R"(#sdy.sharding<mesh<["a"=2]>, [{}, {"a"}]>)");
const std::string kText19 = Dump(R"(#sdy.sharding<@mesh, [{"data"}], unreduced={"model"}>)");
const std::string kText20 = Dump(R"(#sdy.sharding<@mesh, [{"data"}, {"model"}]>)");
const std::string kText21 = Dump(R"(#sdy.sharding<@mesh, [{"data"}, {"model"}]>)");
const std::string kText22 = Dump(R"(#sdy.sharding<@nowhere, [{"x"}]>)");
const std::string kText23 = Dump(R"(#sdy.sharding<@mesh, [{"batch"}]>)");
const std::string kText24 = Dump(R"(#sdy.sharding<@mesh, [{"model":(3)2}]>)");
const std::string kText25 = Dump(R"(#sdy.sharding<@mesh, [{"data"}, {"data"}]>)");
const std::string kText26 = Dump(R"(#sdy.sharding<@mesh, [{"data"}]>)");
const std::string kText27 = Dump(R"(#sdy<manual_axes{"data", "model"}>)");
const std::string kText28 = Dump(R"(#sdy.sharding_per_value<[<@mesh, [{"data"}]>, <@mesh, []>]>)");
const std::string kText29 = Dump(R"(HloModule jit_train, num_partitions=8, frontend_attributes={xla.sdy.meshes="{mesh = #sdy.mesh<[\x22data\x22=2, \x22fsdp\x22=2, \x22tensor\x22=2]>}"}

ENTRY %main.6 (w: f32[16,32], x: f32[8,16]) -> f32[8,32] {
  %w = f32[16,32] parameter(0), frontend_attributes={xla.sdy.sharding="#sdy.sharding<@mesh, [{\x22fsdp\x22}, {\x22tensor\x22}]>"}
  %x = f32[8,16] parameter(1), sharding={devices=[2,1,4]<=[8] last_tile_dim_replicate}, frontend_attributes={xla.sdy.sharding="#sdy.sharding<@mesh, [{\x22data\x22}, {}]>"}
  %dot = f32[8,32] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[2,2,2]<=[2,2,2]T(0,2,1) last_tile_dim_replicate}, frontend_attributes={xla.sdy.sharding="#sdy.sharding<@mesh, [{\x22data\x22}, {\x22fsdp\x22}]>"}
  ROOT %r = f32[8,32] custom-call(%dot), custom_call_target="xla.sdy.FuncResultSharding", custom_call_has_side_effect=true, frontend_attributes={xla.sdy.sharding="#sdy.sharding_per_value<[<@mesh, [{\x22data\x22}, {\x22tensor\x22}]>]>"}
}
)");
const std::string kText30 = Dump(R"(HloModule jit_shmap, num_partitions=4, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["x"=4]>}}

%region_add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

xla.sdy.manual_computation_body {
  arg = f32[2,8] parameter(0)
  ROOT psum = f32[2,8] all-reduce(arg), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%region_add
}

ENTRY main {
  p = f32[8,8] parameter(0), frontend_attributes={xla.sdy.sharding="#sdy.sharding<@mesh, [{\x22x\x22}, {}]>"}
  local = f32[2,8] custom-call(p), custom_call_target="xla.sdy.GlobalToLocalShape", custom_call_has_side_effect=true, frontend_attributes={xla.sdy.in_shardings="#sdy.sharding_per_value<[<@mesh, [{\x22x\x22}, {}]>]>",xla.sdy.manual_axes="#sdy<manual_axes{\x22x\x22}>"}
  body = f32[2,8] call(local), to_apply=xla.sdy.manual_computation_body
  ROOT global = f32[8,8] custom-call(body), custom_call_target="xla.sdy.LocalToGlobalShape", custom_call_has_side_effect=true, frontend_attributes={xla.sdy.manual_axes="#sdy<manual_axes{\x22x\x22}>",xla.sdy.out_shardings="#sdy.sharding_per_value<[<@mesh, [{\x22x\x22}, {}]>]>"}
}
)");
const std::string kText31 = Dump(R"(HloModule m, frontend_attributes={xla.sdy.meshes="{mesh = #sdy.mesh<[\x22x\x22=2]>}"}
ENTRY e {
  p = f32[4] parameter(0), frontend_attributes={xla.sdy.sharding="#sdy.sharding<@mesh, [{\x22y\x22}]>"}
  ROOT q = f32[4] negate(p), frontend_attributes={xla.sdy.sharding="#sdy.sharding<@mesh, [{\x22x\x22}"}
}
)");
const std::string kText32 = Dump(R"(HloModule m, num_partitions=2
%s (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = f32[] add(%a, %b)
}
ENTRY e {
  p = f32[2] parameter(0), sharding={devices=[2]<=[2]}
  ROOT ar = f32[2] all-reduce(p), channel_id=1, replica_groups={{0,1}}, to_apply=%s
})");
const std::string kText33 = Dump(R"(HloModule m, num_partitions=2
%s (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = f32[] add(%a, %b)
}
ENTRY e {
  p = f32[4] parameter(0), sharding={devices=[2]<=[2]}
  ROOT ar = f32[4] all-reduce(p), replica_groups={}, to_apply=%s
})");
const std::string kText34 = Dump(R"(HloModule m, num_partitions=2
%s (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = f32[] add(%a, %b)
}
ENTRY e {
  p = f32[4] parameter(0), sharding={devices=[2]<=[2]}
  sh = f32[4] custom-call(p), custom_call_target="Sharding", sharding={devices=[2]<=[2]}
  local = f32[2] custom-call(sh), custom_call_target="SPMDFullToShardShape", sharding={manual}
  ar = f32[2] all-reduce(local), channel_id=1, replica_groups={{0,1}}, to_apply=%s
  m2 = f32[2] custom-call(ar), custom_call_target="Sharding", sharding={manual}
  ROOT full = f32[4] custom-call(m2), custom_call_target="SPMDShardToFullShape", sharding={devices=[2]<=[2]}
})");

const char* const kAsyncSim = R"(HloModule async_sim, is_scheduled=true, num_partitions=4

%sum (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(%x, %y)
}

%fc (q: f32[16,8]) -> f32[16,8] {
  %q = f32[16,8] parameter(0)
  %e = f32[16,8] exponential(%q)
  ROOT %n = f32[16,8] negate(%e)
}

ENTRY %main_spmd (p: f32[16,8]) -> f32[4,8] {
  %p = f32[16,8] parameter(0)
  %f = f32[16,8] fusion(%p), kind=kLoop, calls=%fc
  %a2a-start = ((f32[16,8]), f32[16,8]) all-to-all-start(%f), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
  %a2a-done = f32[16,8] all-to-all-done(%a2a-start)
  %rs-start = ((f32[16,8]), f32[4,8]) reduce-scatter-start(%a2a-done), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=%sum
  ROOT %rs-done = f32[4,8] reduce-scatter-done(%rs-start)
}
)";

}  // namespace

class TestHloRealDumps : public QObject {
  Q_OBJECT

 private slots:
  // ---- source locations ----------------------------------------------------------------------

  void StackFrameTablesGiveSourceLineAndCallStack() {
    auto m = ParseOk(kStackFrames);
    QVERIFY(m);
    QCOMPARE(m->stack_frames.file_names.size(), size_t{2});
    QCOMPARE(m->stack_frames.function_names.size(), size_t{3});
    QCOMPARE(m->stack_frames.file_locations.size(), size_t{3});
    QCOMPARE(m->stack_frames.stack_frames.size(), size_t{3});
    QCOMPARE(m->stack_frames.file_locations[1].end_line, int64_t{42});
    const Instruction* tanh = Find(*m, "tanh.2");
    QVERIFY(tanh);
    auto loc = SourceLocationOf(*m, *tanh);
    QVERIFY(loc.has_value());
    // Frame 3 (mlp_block, layers.py:17) was called from frame 2 (train_step, train.py:41), called
    // from frame 1 (<module>, train.py:90): XLA writes parent_frame_id as the parent's id + 1.
    QCOMPARE(loc->frames.size(), size_t{3});
    QCOMPARE(QString::fromStdString(loc->ToString()), QString("/home/user/model/layers.py:17"));
    QCOMPARE(QString::fromStdString(loc->frames[0].function), QString("mlp_block"));
    QCOMPARE(loc->frames[0].column, int64_t{8});
    QCOMPARE(QString::fromStdString(loc->frames[1].ToString()), QString("/home/user/train.py:41:10 (train_step)"));
    QCOMPARE(QString::fromStdString(loc->frames[2].function), QString("<module>"));
    // stack_frame_id wins over the older inline source_file/source_line.
    auto add = SourceLocationOf(*m, *Find(*m, "add.3"));
    QVERIFY(add.has_value());
    QCOMPARE(QString::fromStdString(add->ToString()), QString("/home/user/train.py:41"));
    QCOMPARE(add->frames.size(), size_t{2});
    // No metadata location at all.
    QVERIFY(!SourceLocationOf(*m, *Find(*m, "x.1")).has_value());
    QCOMPARE(QString::fromStdString(MetadataField(*tanh, "scheduling_name").value_or("")), QString("tanh.2"));
    QCOMPARE(QString::fromStdString(MetadataField(*tanh, "op_name").value_or("")), QString("jit(step)/tanh"));
    CHECK_ROUND_TRIP(m);
    const std::string printed = PrintHloModule(*m);
    QVERIFY(printed.find("\nStackFrames\n1 {file_location_id=1 parent_frame_id=1}\n2 {") != std::string::npos);
    QVERIFY(printed.find("2 {file_name_id=1 function_name_id=2 line=41 end_line=42 column=10 end_column=31}") !=
            std::string::npos);
  }

  void InlineSourceFileAndMalformedFramesStaySafe() {
    // Older dumps write source_file/source_line inline; a frame id past the table or a parent
    // loop must not crash or hang.
    auto m = ParseOk(kText1);
    QVERIFY(m);
    QCOMPARE(QString::fromStdString(SourceLocationOf(*m, *Find(*m, "p"))->ToString()), QString("legacy.py:12"));
    auto a = SourceLocationOf(*m, *Find(*m, "a"));  // 1 -> 2 -> 1 -> ... stops after the table size
    QVERIFY(a && a->frames.size() <= 2);
    QVERIFY(!SourceLocationOf(*m, *Find(*m, "b")).has_value());
    auto c = SourceLocationOf(*m, *Find(*m, "c"));  // ids outside the name tables: empty names
    QVERIFY(c && c->frames.size() == 2 && c->frames[0].file.empty() && c->frames[0].line == 5);
    CHECK_ROUND_TRIP(m);
  }

  // ---- header, computations, attributes kept as written -------------------------------------

  void ScheduledModuleWithExecutionThreadsAndAsyncWrappers() {
    auto m = ParseOk(kText2);
    QVERIFY(m);
    QVERIFY(m->is_scheduled);
    QCOMPARE(m->num_partitions, int64_t{2});
    QCOMPARE(QString::fromStdString(m->FindComputation("async_wrapped")->execution_thread), QString("host"));
    QVERIFY(m->FindComputation("fused_computation")->execution_thread.empty());
    const Instruction* start = Find(*m, "async-start");
    QCOMPARE(AsyncPartOf(*start), AsyncPart::kStart);
    QCOMPARE(AsyncPartOf(*Find(*m, "async-update")), AsyncPart::kUpdate);
    QCOMPARE(AsyncPartOf(*Find(*m, "async-done")), AsyncPart::kDone);
    QCOMPARE(AsyncWrappedComputation(*start), m->FindComputation("async_wrapped"));
    QCOMPARE(AsyncWrappedComputation(*Find(*m, "async-done")), m->FindComputation("async_wrapped"));
    QVERIFY(!CollectiveOpcodeOf(*start).has_value());  // wraps a sqrt, not a collective
    QCOMPARE(AsyncPartOf(*Find(*m, "copy-start")), AsyncPart::kStart);
    QCOMPARE(QString::fromStdString(FindRawAttribute(*start, "async_execution_thread")->value), QString("\"host\""));
    const Instruction* fusion = Find(*m, "fusion");
    QVERIFY(IsFusion(*fusion));
    QCOMPARE(FusionKindOf(*fusion), std::optional<FusionKind>(FusionKind::kOutput));
    QCOMPARE(FusedComputation(*fusion), m->FindComputation("fused_computation"));
    QVERIFY(IsBackendOptimized(*m));
    QVERIFY(AlreadyPartitioned(*m).has_value());
    // The tiled layouts and memory spaces are kept as written.
    QCOMPARE(QString::fromStdString(Find(*m, "copy-done")->shape().ToString()), QString("f32[64]{0:T(256)S(1)}"));
    QCOMPARE(QString::fromStdString(ModuleFrontendAttribute(*m, "fingerprint_before_lhs").value_or("")), QString("0f1e"));
    CHECK_ROUND_TRIP(m);
    const std::string printed = PrintHloModule(*m);
    QVERIFY(printed.find("\x7d, execution_thread=\"host\"\n") != std::string::npos);  // \x7d: a closing brace
    QVERIFY(printed.rfind("HloModule jit_f, is_scheduled=true,", 0) == 0);
  }

  void EveryFusionKind() {
    for (const char* kind : {"kLoop", "kInput", "kOutput", "kCustom"}) {
      const std::string text = std::string(kText3) + kind + kText4;
      auto m = ParseOk(text);
      QVERIFY(m);
      const Instruction* f = Find(*m, "f");
      QVERIFY(FusionKindOf(*f).has_value());
      QCOMPARE(QString::fromStdString(std::string(FusionKindName(*FusionKindOf(*f)))), QString(kind));
      QVERIFY(FindRawAttribute(*f, "output_to_operand_aliasing"));
      CHECK_ROUND_TRIP(m);
    }
  }

  void AsyncCollectivePairs() {
    // The async forms XLA's backend writes: typed -start/-done pairs, a wrapped collective written
    // as <op>-start (attributes inline), and async-start around a collective computation.
    auto m = ParseOk(kText5);
    QVERIFY(m);
    QCOMPARE(CollectiveOpcodeOf(*Find(*m, "ag-start")), std::optional<Opcode>(Opcode::kAllGather));
    QCOMPARE(CollectiveOpcodeOf(*Find(*m, "ar-start")), std::optional<Opcode>(Opcode::kAllReduce));
    QCOMPARE(CollectiveOpcodeOf(*Find(*m, "cp-start")), std::optional<Opcode>(Opcode::kCollectivePermute));
    QCOMPARE(CollectiveOpcodeOf(*Find(*m, "rs-start")), std::optional<Opcode>(Opcode::kReduceScatter));
    QCOMPARE(CollectiveOpcodeOf(*Find(*m, "a2a-start")), std::optional<Opcode>(Opcode::kAllToAll));
    QVERIFY(!CollectiveOpcodeOf(*Find(*m, "ag-done")).has_value());
    QCOMPARE(AsyncPartOf(*Find(*m, "rs-done")), AsyncPart::kDone);
    QCOMPARE(AsyncPartOf(*Find(*m, "send")), AsyncPart::kStart);
    QCOMPARE(AsyncPartOf(*Find(*m, "recv-done")), AsyncPart::kDone);
    QCOMPARE(Find(*m, "rs-start")->to_apply(), m->FindComputation("sum"));
    QCOMPARE(Find(*m, "ag-start")->replica_groups.groups.size(), size_t{1});
    // A wrapped collective written <op>-start carries its collective's attributes, typed.
    const Instruction* rs = Find(*m, "rs-start");
    QCOMPARE(rs->replica_groups.groups, (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}}));
    QCOMPARE(rs->dimensions, (std::vector<int64_t>{0}));
    QCOMPARE(rs->channel_id, std::optional<int64_t>(4));
    CHECK_ROUND_TRIP(m);
    QVERIFY(AlreadyPartitioned(*m).has_value());

    // Simulated as it is: the fusion is one kernel, the async collectives are collectives.
    DumpCaseResult r = RunDumpCase("async.hlo", kAsyncSim, DumpConformanceOptions{});
    QVERIFY2(r.passed(), r.failures.empty() ? "" : r.failures[0].c_str());
    QCOMPARE(r.simulate, 1);
    QCOMPARE(r.devices, int64_t{4});
    QCOMPARE(r.simulated_compute_ops, int64_t{1});
    QCOMPARE(r.simulated_collectives, int64_t{2});
  }

  void AttributesOfAnyContentAreKeptVerbatim() {
    auto m = ParseOk(kText6);
    QVERIFY(m);
    const Instruction* cc = Find(*m, "cc");
    QCOMPARE(QString::fromStdString(cc->backend_config), QString("\"\\000\\002 \\001\\377x\""));
    QCOMPARE(QString::fromStdString(FrontendAttribute(cc->frontend_attributes, "_scheduling_group_id").value_or("")),
             QString("3"));
    QCOMPARE(QString::fromStdString(FrontendAttribute(cc->frontend_attributes, "kernel_metadata").value_or("")),
             QString("{}"));
    QCOMPARE(QString::fromStdString(FindRawAttribute(*cc, "schedule")->value), QString("SCHEDULE_LATEST"));
    QCOMPARE(QString::fromStdString(Find(*m, "bare")->backend_config), QString("opaque_token"));
    QCOMPARE(QString::fromStdString(FindRawAttribute(*Find(*m, "p"), "origin")->value), QString("{{\"p\"}}"));
    QVERIFY(Find(*m, "p")->shape().dynamic_dims.size() == 2 && Find(*m, "p")->shape().dynamic_dims[1]);
    QCOMPARE(QString::fromStdString(ModuleFrontendAttribute(*m, "nested").value_or("")), QString("{a={b=\"c\"}}"));
    CHECK_ROUND_TRIP(m);
  }

  void EveryElementTypeParses() {
    for (const char* type : {"pred", "s1", "s2", "s4", "s8", "s16", "s32", "s64", "u1", "u2", "u4", "u8", "u16", "u32", "u64",
                             "f4e2m1fn", "f8e3m4", "f8e4m3", "f8e5m2", "f8e4m3fn", "f8e4m3b11fnuz", "f8e5m2fnuz",
                             "f8e4m3fnuz", "f8e8m0fnu", "f16", "bf16", "f32", "f64", "c64", "c128"}) {
      const std::string t(type);
      auto m = ParseOk("HloModule m\nENTRY e {\n  p = " + t + "[4,2]{0,1:T(2,128)(4,1)} parameter(0)\n  ROOT c = " + t +
                       "[4,2]{1,0} copy(p)\n}\n");
      QVERIFY2(m, type);
      QCOMPARE(QString::fromStdString(std::string(PrimitiveTypeName(Find(*m, "c")->shape().type))), QString(type));
      CHECK_ROUND_TRIP(m);
    }
    QCOMPARE(PrimitiveTypeBitWidth(PrimitiveType::kF4E2M1FN), int64_t{4});
    QCOMPARE(PrimitiveTypeBitWidth(PrimitiveType::kU1), int64_t{1});
    QVERIFY(IsFloatingPoint(PrimitiveType::kF8E3M4));
  }

  // ---- other frontends ---------------------------------------------------------------------

  void PyTorchXlaDataParallelStep() {
    // PyTorch/XLA: a SyncTensorsGraph with an input/output alias table, an all-reduce of several
    // operands (one a scalar, the loss) with empty replica groups, replicas instead of partitions.
    auto m = ParseOk(kText7);
    QVERIFY(m);
    QCOMPARE(m->num_replicas, int64_t{8});
    const Instruction* ar = Find(*m, "all-reduce.14");
    QCOMPARE(ar->operand_count(), int64_t{3});
    QVERIFY(ar->shape().IsTuple());
    CHECK_ROUND_TRIP(m);
    auto evidence = AlreadyPartitioned(*m);
    QVERIFY(evidence.has_value());  // (e): a collective and nothing to partition
    QVERIFY(evidence->find("no tiled or maximal sharding") != std::string::npos);
    // The dump pipeline simulates it as it is, on its 8 replicas.
    DumpCaseResult r = RunDumpCase("ptxla.hlo", PrintHloModule(*m), DumpConformanceOptions{});
    QVERIFY2(r.passed(), r.failures.empty() ? "" : r.failures[0].c_str());
    QCOMPARE(r.devices, int64_t{8});
    QCOMPARE(r.simulate, 1);
  }

  void TensorFlowClusterModule() {
    // TensorFlow's tf2xla: cluster_* module names, the arg tuple in the signature, a while loop
    // with a known trip count, scalar predicates.
    auto m = ParseOk(kText8);
    QVERIFY(m);
    CHECK_ROUND_TRIP(m);
    QVERIFY(!AlreadyPartitioned(*m).has_value());
    DumpCaseResult r = RunDumpCase("tf.hlo", PrintHloModule(*m), DumpConformanceOptions{});
    QVERIFY2(r.passed(), r.failures.empty() ? "" : r.failures[0].c_str());
    QCOMPARE(r.simulate, 1);
  }

  // ---- Shardy -------------------------------------------------------------------------------

  void ShardyMeshesAndShardingsToHlo() {
    auto meshes = ParseSdyMeshes(
        kText9);
    QVERIFY2(meshes.ok(), meshes.ok() ? "" : meshes.error().message.c_str());
    QCOMPARE(meshes->size(), size_t{4});
    QCOMPARE(QString::fromStdString((*meshes)[0].mesh.ToString()), QString("data=2,model=4"));
    QCOMPARE((*meshes)[1].mesh.device_order(), (std::vector<int64_t>{1, 0}));
    // The HloSharding of one Shardy sharding text (an error text when it has none).
    auto hlo = [&](std::string_view text, const std::vector<std::string>& manual = {}) -> Result<HloSharding> {
      auto s = ParseSdyShardings(text);
      if (!s.ok()) return s.error();
      if (s->size() != 1) return Error("expected one sharding");
      return SdyToHloSharding((*s)[0], *meshes, manual);
    };
    auto is = [&](std::string_view text, const HloSharding& want, const std::vector<std::string>& manual = {}) {
      auto h = hlo(text, manual);
      if (!h.ok()) {
        qWarning("%s: %s", std::string(text).c_str(), h.error().message.c_str());
        return false;
      }
      if (!(*h == want)) qWarning("%s gave %s, want %s", std::string(text).c_str(), h->ToString().c_str(), want.ToString().c_str());
      return *h == want;
    };
    auto error_of = [&](std::string_view text) {
      auto h = hlo(text);
      return h.ok() ? std::string() : h.error().message;
    };
    // Dim 0 over "data", dim 1 over "model": the tile assignment is the mesh itself.
    QVERIFY(is(kText10, HloSharding::Tile(TileAssignment::Iota({2, 4}))));
    // Transposed use of the axes.
    QVERIFY(is(kText11,
               HloSharding::Tile(TileAssignment::Iota({4, 2}, {2, 4}, {1, 0}))));
    // Both axes on one dimension, major first.
    QVERIFY(is(kText12,
               HloSharding::Tile(TileAssignment::Iota({8, 1}, {2, 4}, {1, 0}))));
    // Only "model" used (an open dimension, a priority): replicated over "data".
    QVERIFY(is(kText13,
               HloSharding::PartialTile(TileAssignment::Iota({1, 4, 2}, {2, 4}, {1, 0}))));
    // A sub-axis: "model":(2)2 is the minor half of model; the major half replicates.
    auto sub_expected = MeshShard(2, DeviceMesh({{"data", 2}, {"m0", 2}, {"m1", 2}}), AxisAssignment{{{2}, {0}}, {}, {}});
    QVERIFY(sub_expected.ok());
    QVERIFY(is(kText14, *sub_expected));
    // Explicit device ids, a maximal mesh, the empty mesh, an inline mesh, unreduced axes.
    QVERIFY(is(kText15, HloSharding::Tile(TileAssignment::Explicit({2}, {1, 0}))));
    QVERIFY(is(kText16, HloSharding::AssignDevice(3)));
    QVERIFY(is(kText17, HloSharding::Replicate()));
    QVERIFY(is(kText18, HloSharding::Tile(TileAssignment::Iota({1, 2}))));
    auto unreduced = hlo(kText19);
    QVERIFY(unreduced.ok());
    QCOMPARE(unreduced->subgroup_types(), std::vector<HloSharding::SubgroupType>{HloSharding::SubgroupType::kUnreduced});
    // Manual axes: the local value of a manual computation.
    QVERIFY(is(kText20, HloSharding::Manual(), {"data", "model"}));
    auto partial = hlo(kText21, {"data"});
    QVERIFY(partial.ok() && partial->HasManualSubgroup());
    QCOMPARE(partial->DimensionTiles(1), int64_t{4});  // "model" still splits dim 1
    QCOMPARE(partial->DimensionTiles(0), int64_t{1});  // "data" is the region's own
    // Errors are values with the reason.
    QVERIFY(error_of(kText22).find("xla.sdy.meshes does not define") != std::string::npos);
    QVERIFY(error_of(kText23).find("does not have") != std::string::npos);
    QVERIFY(error_of(kText24).find("does not divide") != std::string::npos);
    QVERIFY(!error_of(kText25).empty());
    std::string truncated = kText26;
    truncated.resize(truncated.size() - 3);  // unterminated (built at run time: keeps braces balanced here)
    QVERIFY(!ParseSdyShardings(truncated).ok());
    auto manual = ParseSdyManualAxes(kText27);
    QVERIFY(manual.ok() && manual->size() == 2 && (*manual)[1] == "model");
    auto per_value = ParseSdyShardings(kText28);
    QVERIFY(per_value.ok() && per_value->size() == 2 && (*per_value)[1].dims.empty());
  }

  void ShardyAttributesInAModule() {
    // A JAX-with-Shardy dump: the mesh with the user's axis names in the header, shardings only
    // as frontend attributes, one instruction whose sharding= disagrees with its Shardy sharding.
    Parsed p = ParseWithWarnings(kText29);
    QVERIFY2(p.module, p.error.c_str());
    const Module& m = *p.module;
    QCOMPARE(m.sdy_meshes.size(), size_t{1});
    const DeviceMesh* mesh = ModuleMesh(m);
    QVERIFY(mesh);
    QCOMPARE(QString::fromStdString(mesh->ToString()), QString("data=2,fsdp=2,tensor=2"));
    // %w takes its sharding from xla.sdy.sharding: fsdp on dim 0, tensor on dim 1, replicated over data.
    const Instruction* w = Find(m, "w");
    QVERIFY(w->has_sharding());
    auto expected_w = MeshShard(2, *mesh, AxisAssignment{{{1}, {2}}, {}, {}});
    QVERIFY(expected_w.ok() && *w->sharding() == *expected_w);
    // The named-axis notation shows the user's axis names.
    auto named = ToNamedAxes(*w->sharding(), 2, *mesh, "w");
    QVERIFY(named.ok());
    QCOMPARE(QString::fromStdString(*named), QString("w[I_fsdp, J_tensor]"));
    // %x agrees; %dot disagrees (sharding= tiles dim 1 by tensor, Shardy by fsdp): one warning at
    // its line and column, and sharding= is kept.
    QCOMPARE(p.warnings.size(), size_t{1});
    QVERIFY2(p.warnings[0].rfind("dump.hlo:6:3: warning: instruction 'dot': sharding=", 0) == 0, p.warnings[0].c_str());
    QVERIFY(*Find(m, "dot")->sharding() == *HloSharding::Parse("{devices=[2,2,2]<=[2,2,2]T(0,2,1) last_tile_dim_replicate}"));
    // The result-sharding marker became the annotation it stands for.
    const Instruction* r = Find(m, "r");
    QCOMPARE(QString::fromStdString(r->custom_call_target), QString("Sharding"));
    QVERIFY(r->has_sharding());
    CHECK_ROUND_TRIP(p.module);
    // Propagation and partitioning take it from there.
    auto copy = m.Clone();
    QVERIFY(PropagateShardings(*copy).ok());
    auto part = PartitionModule(*copy, SpmdOptions{});
    QVERIFY2(part.ok(), part.ok() ? "" : part.error().message.c_str());
    QCOMPARE(part->module->entry()->parameter(0)->shape().dims, (std::vector<int64_t>{8, 16}));
  }

  void ShardyManualComputationIsAManualRegion() {
    // shard_map with Shardy: GlobalToLocalShape, a call to the body, LocalToGlobalShape; the body
    // does a psum over "x" (an all-reduce inside the manual region).
    const std::string text = kText30;
    Parsed p = ParseWithWarnings(text);
    QVERIFY2(p.module, p.error.c_str());
    QVERIFY2(p.warnings.empty(), p.warnings.empty() ? "" : p.warnings[0].c_str());
    const Module& m = *p.module;
    // GSPMD's manual region: Sharding -> SPMDFullToShardShape ... Sharding -> SPMDShardToFullShape.
    int full_to_shard = 0, shard_to_full = 0;
    for (const auto& i : m.entry()->instructions()) {
      if (i->opcode() != Opcode::kCustomCall) continue;
      QVERIFY(i->custom_call_target.rfind("xla.sdy.", 0) != 0);
      if (i->custom_call_target == "SPMDFullToShardShape") {
        ++full_to_shard;
        QVERIFY(i->sharding()->IsManual());
        QCOMPARE(i->shape().dims, (std::vector<int64_t>{2, 8}));
        QVERIFY(*i->operand(0)->sharding() == HloSharding::Tile(TileAssignment::Iota({4, 1})));
      }
      if (i->custom_call_target == "SPMDShardToFullShape") {
        ++shard_to_full;
        QVERIFY(*i->sharding() == HloSharding::Tile(TileAssignment::Iota({4, 1})));
        QVERIFY(i->operand(0)->sharding()->IsManual());
      }
    }
    QCOMPARE(full_to_shard, 1);
    QCOMPARE(shard_to_full, 1);
    QVERIFY(m.entry()->root()->custom_call_target == "SPMDShardToFullShape");
    CHECK_ROUND_TRIP(p.module);
    // The all-reduce inside the body does not make it an SPMD program: it is inside the region.
    QVERIFY(!AlreadyPartitioned(m).has_value());
    // Partitioned and verified numerically (each device's rows summed across devices).
    DumpCaseResult r = RunDumpCase("shmap.hlo", text, DumpConformanceOptions{});
    QVERIFY2(r.passed(), r.failures.empty() ? "" : r.failures[0].c_str());
    QCOMPARE(r.partition, 1);
    QCOMPARE(r.verify, 1);
    QCOMPARE(r.devices, int64_t{4});
  }

  void MalformedShardyIsAWarningNotAnError() {
    Parsed p = ParseWithWarnings(kText31);
    QVERIFY2(p.module, p.error.c_str());
    QCOMPARE(p.warnings.size(), size_t{2});
    QVERIFY(p.warnings[0].rfind("dump.hlo:3:3: warning: instruction 'p': xla.sdy.sharding:", 0) == 0);
    QVERIFY(p.warnings[1].rfind("dump.hlo:4:8: warning: instruction 'q': xla.sdy.sharding:", 0) == 0);
    QVERIFY(!Find(*p.module, "p")->has_sharding());
  }

  // ---- already partitioned ----------------------------------------------------------------

  void AlreadyPartitionedRule() {
    auto evidence = [](const std::string& text) -> std::string {
      auto m = ParseOk(text);
      if (!m) return "parse failed";
      return AlreadyPartitioned(*m).value_or("");
    };
    // (a) XLA's _spmd entry.
    QVERIFY(evidence("HloModule m\nENTRY %main.5_spmd {\n  ROOT p = f32[2] parameter(0), sharding={devices=[2]<=[2]}\n}\n")
                .find("_spmd") != std::string::npos);
    // (d) a cross-partition collective outside every manual region.
    QVERIFY(evidence(kText32)
                .find("outside every manual region") != std::string::npos);
    // A global program: shardings, no communication.
    QCOMPARE(QString::fromStdString(evidence(
                 "HloModule m, num_partitions=2\nENTRY e {\n  p = f32[4] parameter(0), sharding={devices=[2]<=[2]}\n  ROOT n = f32[4] negate(p)\n}\n")),
             QString(""));
    // A cross-replica all-reduce (no channel_id) in a global program with shardings is global.
    QCOMPARE(QString::fromStdString(evidence(kText33)),
             QString(""));
    // A manual region in GSPMD's own form keeps its collectives inside.
    QCOMPARE(QString::fromStdString(evidence(kText34)),
             QString(""));
  }

  void PartitionLeavesAnSpmdProgramUnchanged() {
    // The CLI: `partition` on an optimised dump says so and prints it unchanged; `check` shows
    // the evidence, the mesh with its axis names, and the source lines.
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string spmd_path = dir.filePath("spmd.hlo").toStdString();
    {
      std::ofstream out(spmd_path);
      out << "HloModule jit_f, is_scheduled=true, num_partitions=2\n\n"
             "%fc (p: f32[4]) -> f32[4] {\n  %p = f32[4] parameter(0)\n  ROOT %n = f32[4] negate(%p)\n}\n\n"
             "ENTRY %main.3_spmd (a: f32[4]) -> f32[4] {\n"
             "  %a = f32[4]{0} parameter(0), sharding={devices=[2]<=[2]}\n"
             "  ROOT %f = f32[4]{0} fusion(%a), kind=kLoop, calls=%fc\n}\n";
    }
    QProcess cli;
    cli.start(SHARDSCOPE_CLI_PATH, {"partition", QString::fromStdString(spmd_path)});
    QVERIFY(cli.waitForFinished(60000));
    QCOMPARE(cli.exitCode(), 0);
    const QString out = QString::fromUtf8(cli.readAllStandardOutput());
    const QString err = QString::fromUtf8(cli.readAllStandardError());
    QVERIFY2(err.contains("already partitioned (entry computation 'main.3_spmd'"), qPrintable(err));
    QVERIFY(out.contains("%f = f32[4]{0} fusion(%a), kind=kLoop, calls=%fc"));
    QVERIFY(!out.contains("all-gather"));

    const std::string src_path = dir.filePath("src.hlo").toStdString();
    {
      std::ofstream out(src_path);
      out << kStackFrames;
    }
    QProcess check;
    check.start(SHARDSCOPE_CLI_PATH, {"check", QString::fromStdString(src_path), "--source", "tanh.2"});
    QVERIFY(check.waitForFinished(60000));
    QCOMPARE(check.exitCode(), 0);
    const QString source = QString::fromUtf8(check.readAllStandardOutput());
    QVERIFY2(source.contains("tanh.2: /home/user/model/layers.py:17\n"), qPrintable(source));
    QVERIFY(source.contains("  at /home/user/model/layers.py:17:8 (mlp_block)\n"));
    QVERIFY(source.contains("  called from /home/user/train.py:41:10 (train_step)\n"));
  }
};

QTEST_APPLESS_MAIN(TestHloRealDumps)
#include "test_hlo_real_dumps.moc"
