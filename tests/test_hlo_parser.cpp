// Tests of the XLA HLO text parser and printer (core/hlo_text.h): real module structure, typed
// attributes, positioned errors for malformed text, round trips, fuzzing (no crash, every error a
// single positioned line) and the check/print CLI subcommands.
#include <QFileInfo>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <cmath>
#include <sstream>
#include <string>

#include "core/ir/hlo_text.h"
#include "tests/built_paths.h"

using namespace shardscope;

namespace {

std::unique_ptr<Module> Parse(std::string_view text, bool verify = false) {
  ParseOptions options;
  options.verify = verify;
  auto r = ParseHloModule(text, "test.hlo", options);
  if (!r.ok()) {
    qWarning("%s", r.error().message.c_str());
    return nullptr;
  }
  return std::move(r).value();
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string CorpusDir() { return std::string(SHARDSCOPE_SHARED_DIR) + "/conformance/xla"; }

// Recomputes line:column of a byte offset, independently of the parser.
std::string LineColumn(std::string_view text, int64_t offset) {
  int64_t line = 1, col = 1;
  for (int64_t i = 0; i < offset && i < static_cast<int64_t>(text.size()); ++i) {
    if (text[static_cast<size_t>(i)] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

// Every failure must be one line "NAME:LINE:COL: error: ...", with LINE:COL matching the offset.
bool ErrorIsWellFormed(std::string_view text, const Error& e, const std::string& name, std::string* why) {
  const std::string& m = e.message;
  if (m.find('\n') != std::string::npos || m.find('\r') != std::string::npos) {
    *why = "multi-line message: " + m;
    return false;
  }
  if (e.offset < 0 || e.offset > static_cast<int64_t>(text.size())) {
    *why = "offset out of range: " + std::to_string(e.offset) + " in " + m;
    return false;
  }
  const std::string prefix = name + ":" + LineColumn(text, e.offset) + ": error: ";
  if (m.rfind(prefix, 0) != 0 || m.size() == prefix.size()) {
    *why = "expected prefix '" + prefix + "' in: " + m;
    return false;
  }
  return true;
}

// A transformer-style MLP block with shardings, metadata, layouts and a reducer defined after use.
const char kMlp[] = R"(HloModule mlp_block, num_partitions=4, entry_computation_layout={(f32[8,16]{1,0}, f32[16,32]{1,0})->f32[8]{0}}, is_scheduled=true

// The entry is written first; its reducer comes later in the file.
ENTRY %main.7 (x: f32[8,16], w: f32[16,32]) -> f32[8] {
  %x = f32[8,16]{1,0} parameter(0), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}, metadata={op_name="jit(f)/x" source_file="model.py" source_line=12}
  %w = f32[16,32]{1,0} parameter(1), sharding={devices=[1,4]<=[4]}
  %dot = f32[8,32]{1,0} dot(f32[8,16]{1,0} %x, f32[16,32]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[2,2]<=[4]}, operand_precision={highest,highest}
  /* the bias is a broadcast constant */
  %bias = f32[32]{0} constant({...})
  %b = f32[8,32]{1,0} broadcast(f32[32]{0} %bias), dimensions={1}
  %sum = f32[8,32]{1,0} add(%dot, %b)
  %zero = f32[] constant(0)
  ROOT %reduce = f32[8]{0} reduce(%sum, %zero), dimensions={1}, to_apply=%add.clone, sharding={devices=[2,2]<=[4] last_tile_dim_replicate}
}

%add.clone (lhs: f32[], rhs: f32[]) -> f32[] {
  %lhs = f32[] parameter(0)
  %rhs = f32[] parameter(1)
  ROOT %add = f32[] add(f32[] %lhs, f32[] %rhs)
}
)";

// A while loop whose body reads a channel, plus a conditional, a sort and collectives.
const char kControl[] = R"(HloModule control_flow, replica_count=2, num_partitions=8

%cond (s: (s32[], f32[4])) -> pred[] {
  %s = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(10)
  ROOT %lt = pred[] compare(%i, %n), direction=LT, type=SIGNED
}

%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add = f32[] add(%a, %b)
}

%body (s: (s32[], f32[4])) -> (s32[], f32[4]) {
  %s = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %v = f32[4] get-tuple-element(%s), index=1
  %ar = f32[4] all-reduce(%v), channel_id=3, replica_groups=[2,4]<=[4,2]T(1,0), use_global_device_ids=true, to_apply=%sum
  %cp = f32[4] collective-permute(%ar), channel_id=4, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  ROOT %t = (s32[], f32[4]) tuple(%next, %cp)
}

%less (p0: f32[], p1: f32[]) -> pred[] {
  %p0 = f32[] parameter(0)
  %p1 = f32[] parameter(1)
  ROOT %c = pred[] compare(%p0, %p1), direction=LT
}

%then (x: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  ROOT %neg = f32[4] negate(%x)
}

%else (x: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  ROOT %abs = f32[4] abs(%x)
}

ENTRY %entry (v: f32[4], flag: pred[]) -> (f32[4], f32[4], f32[8]) {
  %flag = pred[] parameter(1)
  %v = f32[4] parameter(0), sharding={replicated}
  %zero = s32[] constant(0)
  %init = (s32[], f32[4]) tuple(%zero, %v)
  %loop = (s32[], f32[4]) while(%init), body=%body, condition=%cond, backend_config={"known_trip_count":{"n":"10"}}
  %out = f32[4] get-tuple-element(%loop), index=1
  %sorted = f32[4] sort(%out), dimensions={0}, is_stable=true, to_apply=%less
  %branch = f32[4] conditional(%flag, %sorted, %sorted), true_computation=%then, false_computation=%else
  %ag = f32[8] all-gather(%branch), channel_id=5, replica_groups={{0,1},{2,3},{4,5},{6,7}}, dimensions={0}, use_global_device_ids=true
  %sync = f32[4] custom-call(%out), custom_call_target="Sharding", sharding={devices=[2]0,1}, backend_config="unspecified_dims=[0]", control-predecessors={%sorted}
  ROOT %result = (f32[4], f32[4], f32[8]) tuple(%sync, %branch, %ag), frontend_attributes={_xla_stream="1"}
}
)";

// Convolution, reduce-window, gather, scatter, slicing ops, constants and ops outside opcodes.h.
const char kArrayOps[] = R"(HloModule array_ops

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

ENTRY %e (img: f32[1,8,8,3], k: f32[3,3,3,16], table: f32[10,4], idx: s32[5,1]) -> f32[1,4,4,16] {
  %img = f32[1,8,8,3] parameter(0)
  %k = f32[3,3,3,16] parameter(1)
  %table = f32[10,4] parameter(2)
  %idx = s32[5,1] parameter(3)
  %cplx = c64[10,4] parameter(4)
  %seed = u32[2] parameter(5)
  %conv = f32[1,4,4,16] convolution(%img, %k), window={size=3x3 stride=2x2 pad=1_1x1_1 rhs_dilate=1x1}, dim_labels=b01f_01io->b01f, feature_group_count=1
  %ninf = f32[] constant(-inf)
  %pool = f32[1,4,4,16] reduce-window(%conv, %ninf), window={size=1x3x3x1 stride=1x1x1x1 pad=0_0x1_1x1_1x0_0}, to_apply=%max
  %g = f32[5,4] gather(%table, %idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}, indices_are_sorted=true
  %upd = f32[5,4] negate(%g)
  %sc = f32[10,4] scatter(%table, %idx, %upd), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, unique_indices=true, to_apply=%max
  %sl = f32[4,4] slice(%sc), slice={[0:8:2], [0:4]}
  %zero = f32[] constant(0)
  %padded = f32[6,9] pad(%sl, %zero), padding=1_1x0_1_1
  %start = s32[] constant(1)
  %ds = f32[2,4] dynamic-slice(%sc, %start, %start), dynamic_slice_sizes={2,4}
  %c = f32[2,3] constant({ {1.5, -2, 3e2}, {inf, nan, 0} })
  %mask = pred[3] constant({true, false, true})
  %tl = (f32[], s32[2]) constant((1.5, {1, 2}))
  %fft = c64[10,4] fft(c64[10,4] %cplx), fft_type=FFT, fft_length={4}
  %tr = f32[4,10] transpose(%sc), dimensions={1,0}
  %rbg = (u32[2], u32[8]) rng-bit-generator(u32[2] %seed), algorithm=rng_default
  ROOT %out = f32[1,4,4,16] copy(%pool)
}
)";

}  // namespace

class TestHloParser : public QObject {
  Q_OBJECT

 private slots:
  void parsesMlpBlock();
  void parsesControlFlow();
  void parsesArrayOps();
  void infersOmittedShapes();
  void parsesHeaderlessModule();
  void parsesRealCorpusModules();
  void malformedInputs_data();
  void malformedInputs();
  void verifierErrorsArePositioned();
  void shardingErrorsPointIntoTheFile();
  void roundTripsEmbeddedModules();
  void printsCanonicalInstructions();
  void printerOptions();
  void modulesEqualReportsDifferences();
  void fuzzPrefixes();
  void fuzzMutations();
  void fuzzRandomBytes();
  void cliCheckAndPrint();
};

void TestHloParser::parsesMlpBlock() {
  auto m = Parse(kMlp);
  QVERIFY(m);
  QCOMPARE(m->name(), std::string("mlp_block"));
  QCOMPARE(m->num_partitions, int64_t{4});
  QCOMPARE(m->num_replicas, int64_t{1});
  QCOMPARE(m->entry_computation_layout, std::string("(f32[8,16]{1,0}, f32[16,32]{1,0})->f32[8]{0}"));
  QVERIFY(m->is_scheduled);
  QCOMPARE(m->header_attributes.size(), size_t{0});
  QCOMPARE(m->computations().size(), size_t{2});
  Computation* entry = m->entry();
  QVERIFY(entry);
  QCOMPARE(entry->name(), std::string("main.7"));
  QCOMPARE(m->computations()[1]->name(), std::string("add.clone"));
  QCOMPARE(entry->instruction_count(), int64_t{8});

  Instruction* root = entry->root();
  QCOMPARE(root->name(), std::string("reduce"));
  QCOMPARE(root->opcode(), Opcode::kReduce);
  QCOMPARE(root->shape().ToString(), std::string("f32[8]{0}"));
  QCOMPARE(root->dimensions, std::vector<int64_t>({1}));
  QCOMPARE(root->called_computations().size(), size_t{1});
  QCOMPARE(root->to_apply(), m->computations()[1].get());  // defined after its caller
  QCOMPARE(root->operand(0)->name(), std::string("sum"));
  QVERIFY(root->sharding()->HasPartialReplication());

  Instruction* x = entry->Find("x");
  QVERIFY(x);
  QCOMPARE(x->parameter_number, int64_t{0});
  QVERIFY(x->shape().has_layout);
  QCOMPARE(x->shape().minor_to_major, std::vector<int64_t>({1, 0}));
  QVERIFY(x->sharding()->IsTiled());
  QVERIFY(x->sharding()->HasPartialReplication());
  QCOMPARE(x->sharding()->tile_assignment().dims(), std::vector<int64_t>({2, 1, 2}));
  QCOMPARE(x->op_name(), std::string("jit(f)/x"));
  QCOMPARE(x->metadata, std::string("op_name=\"jit(f)/x\" source_file=\"model.py\" source_line=12"));
  QCOMPARE(entry->parameters().size(), size_t{2});
  QCOMPARE(entry->parameter(1)->name(), std::string("w"));

  Instruction* dot = entry->Find("dot");
  QCOMPARE(dot->opcode(), Opcode::kDot);
  QCOMPARE(dot->dot_dims.lhs_contracting, std::vector<int64_t>({1}));
  QCOMPARE(dot->dot_dims.rhs_contracting, std::vector<int64_t>({0}));
  QVERIFY(dot->dot_dims.lhs_batch.empty());
  QCOMPARE(dot->raw_attributes.size(), size_t{1});
  QCOMPARE(dot->raw_attributes[0].key, std::string("operand_precision"));
  QCOMPARE(dot->raw_attributes[0].value, std::string("{highest,highest}"));
  auto expected = HloSharding::Parse("{devices=[2,2]0,1,2,3}");
  QVERIFY(expected.ok());
  QVERIFY(*dot->sharding() == *expected);  // iota form equals the explicit list
  QCOMPARE(dot->operand(0), x);
  QVERIFY(std::find(x->users().begin(), x->users().end(), dot) != x->users().end());

  Instruction* bias = entry->Find("bias");
  QCOMPARE(bias->literal.text, std::string("{...}"));
  QVERIFY(bias->literal.values.empty());
  QCOMPARE(entry->Find("zero")->literal.values, std::vector<double>({0.0}));
  QCOMPARE(entry->Find("b")->dimensions, std::vector<int64_t>({1}));

  Computation* add = m->computations()[1].get();
  QCOMPARE(add->parameters().size(), size_t{2});
  QCOMPARE(add->root()->opcode(), Opcode::kAdd);
  QCOMPARE(add->root()->operand(1)->name(), std::string("rhs"));
}

void TestHloParser::parsesControlFlow() {
  auto m = Parse(kControl);
  QVERIFY(m);
  QCOMPARE(m->num_replicas, int64_t{2});
  QCOMPARE(m->num_partitions, int64_t{8});
  QCOMPARE(m->computations().size(), size_t{7});
  Computation* entry = m->entry();
  QCOMPARE(entry->name(), std::string("entry"));
  // parameter(1) is written first; parameters() is still indexed by number.
  QCOMPARE(entry->parameters().size(), size_t{2});
  QCOMPARE(entry->parameter(0)->shape().ToString(), std::string("f32[4]"));  // %v (renamed: body has a %v)
  QCOMPARE(entry->parameter(0)->parameter_number, int64_t{0});
  QCOMPARE(entry->parameter(1)->name(), std::string("flag"));
  QCOMPARE(entry->parameter(1)->parameter_number, int64_t{1});

  Instruction* loop = entry->Find("loop");
  QCOMPARE(loop->opcode(), Opcode::kWhile);
  // Written body= first; stored in XLA's order condition, body.
  QCOMPARE(loop->while_condition()->name(), std::string("cond"));
  QCOMPARE(loop->while_body()->name(), std::string("body"));
  QCOMPARE(loop->backend_config, std::string("{\"known_trip_count\":{\"n\":\"10\"}}"));

  Computation* body = m->FindComputation("body");
  Instruction* ar = body->root()->operand(1)->operand(0);
  QCOMPARE(ar->opcode(), Opcode::kAllReduce);
  QCOMPARE(ar->channel_id.value_or(-1), int64_t{3});
  QVERIFY(ar->has_replica_groups);
  QVERIFY(ar->replica_groups.iota_form);
  // [2,4]<=[4,2]T(1,0): iota(8) as 4x2, transposed to 2x4, read row-major.
  QCOMPARE(ar->replica_groups.groups, (std::vector<std::vector<int64_t>>{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  QVERIFY(ar->use_global_device_ids);
  QCOMPARE(ar->to_apply()->name(), std::string("sum"));
  Instruction* cp = body->root()->operand(1);
  QCOMPARE(cp->opcode(), Opcode::kCollectivePermute);
  QCOMPARE(cp->source_target_pairs,
           (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 2}, {2, 3}, {3, 0}}));

  // %s and %i exist in both cond and body: references resolve per computation, and the module
  // keeps names unique (the later definition is renamed, as XLA's name uniquer does).
  Computation* cond = m->FindComputation("cond");
  QCOMPARE(cond->parameter(0)->name(), std::string("s"));
  Instruction* body_param = body->parameter(0);
  QVERIFY(body_param->name() != "s");
  QCOMPARE(body->root()->operand(0)->operand(0)->operand(0), body_param);
  std::set<std::string> names;
  for (const auto& c : m->computations())
    for (const auto& inst : c->instructions()) QVERIFY2(names.insert(inst->name()).second, inst->name().c_str());

  Instruction* lt = cond->root();
  QCOMPARE(lt->comparison, ComparisonDirection::kLt);
  QCOMPARE(lt->comparison_type, std::string("SIGNED"));

  Instruction* sorted = entry->Find("sorted");
  QVERIFY(sorted->is_stable);
  QCOMPARE(sorted->dimensions, std::vector<int64_t>({0}));
  QCOMPARE(sorted->to_apply()->name(), std::string("less"));
  Instruction* branch = entry->Find("branch");
  QCOMPARE(branch->called_computations().size(), size_t{2});
  QCOMPARE(branch->called_computations()[0]->name(), std::string("then"));
  QCOMPARE(branch->called_computations()[1]->name(), std::string("else"));
  Instruction* ag = entry->Find("ag");
  QCOMPARE(ag->replica_groups.groups.size(), size_t{4});
  QCOMPARE(ag->replica_groups.groups[3], std::vector<int64_t>({6, 7}));
  QVERIFY(!ag->replica_groups.iota_form);
  QCOMPARE(ag->dimensions, std::vector<int64_t>({0}));
  Instruction* sync = entry->Find("sync");
  QCOMPARE(sync->custom_call_target, std::string("Sharding"));
  QCOMPARE(sync->UnspecifiedDims(), std::vector<int64_t>({0}));
  QCOMPARE(sync->control_predecessors.size(), size_t{1});
  QCOMPARE(sync->control_predecessors[0], sorted);
  QCOMPARE(entry->root()->frontend_attributes, std::string("_xla_stream=\"1\""));
  QCOMPARE(entry->root()->shape().tuple.size(), size_t{3});
}

void TestHloParser::parsesArrayOps() {
  auto m = Parse(kArrayOps);
  QVERIFY(m);
  Computation* e = m->entry();
  Instruction* conv = e->Find("conv");
  QCOMPARE(conv->window.dims.size(), size_t{2});
  QCOMPARE(conv->window.dims[0].size, int64_t{3});
  QCOMPARE(conv->window.dims[1].stride, int64_t{2});
  QCOMPARE(conv->window.dims[0].padding_low, int64_t{1});
  QCOMPARE(conv->window.dims[1].padding_high, int64_t{1});
  QCOMPARE(conv->conv_dims.input_batch, int64_t{0});
  QCOMPARE(conv->conv_dims.input_feature, int64_t{3});
  QCOMPARE(conv->conv_dims.input_spatial, std::vector<int64_t>({1, 2}));
  QCOMPARE(conv->conv_dims.kernel_input_feature, int64_t{2});
  QCOMPARE(conv->conv_dims.kernel_output_feature, int64_t{3});
  QCOMPARE(conv->conv_dims.kernel_spatial, std::vector<int64_t>({0, 1}));
  QCOMPARE(conv->conv_dims.output_feature, int64_t{3});
  Instruction* pool = e->Find("pool");
  QCOMPARE(pool->window.dims.size(), size_t{4});
  QCOMPARE(pool->window.dims[2].padding_high, int64_t{1});
  QCOMPARE(pool->to_apply()->name(), std::string("max"));
  QVERIFY(std::isinf(e->Find("ninf")->literal.values.at(0)) && e->Find("ninf")->literal.values[0] < 0);

  Instruction* g = e->Find("g");
  QCOMPARE(g->gather_dims.offset_dims, std::vector<int64_t>({1}));
  QCOMPARE(g->gather_dims.collapsed_slice_dims, std::vector<int64_t>({0}));
  QCOMPARE(g->gather_dims.start_index_map, std::vector<int64_t>({0}));
  QCOMPARE(g->gather_dims.index_vector_dim, int64_t{1});
  QCOMPARE(g->gather_slice_sizes, std::vector<int64_t>({1, 4}));
  QVERIFY(g->indices_are_sorted);
  Instruction* sc = e->Find("sc");
  QCOMPARE(sc->scatter_dims.update_window_dims, std::vector<int64_t>({1}));
  QCOMPARE(sc->scatter_dims.inserted_window_dims, std::vector<int64_t>({0}));
  QCOMPARE(sc->scatter_dims.scatter_dims_to_operand_dims, std::vector<int64_t>({0}));
  QCOMPARE(sc->scatter_dims.index_vector_dim, int64_t{1});
  QVERIFY(sc->unique_indices);
  QVERIFY(!sc->indices_are_sorted);
  Instruction* sl = e->Find("sl");
  QCOMPARE(sl->slice.starts, std::vector<int64_t>({0, 0}));
  QCOMPARE(sl->slice.limits, std::vector<int64_t>({8, 4}));
  QCOMPARE(sl->slice.strides, std::vector<int64_t>({2, 1}));
  Instruction* padded = e->Find("padded");
  QCOMPARE(padded->padding.size(), size_t{2});
  QCOMPARE(padded->padding[0], (PaddingDim{1, 1, 0}));
  QCOMPARE(padded->padding[1], (PaddingDim{0, 1, 1}));
  QCOMPARE(e->Find("ds")->dynamic_slice_sizes, std::vector<int64_t>({2, 4}));
  QCOMPARE(e->Find("ds")->operand_count(), int64_t{3});

  Instruction* c = e->Find("c");
  QCOMPARE(c->literal.text, std::string("{ {1.5, -2, 3e2}, {inf, nan, 0} }"));
  QCOMPARE(c->literal.values.size(), size_t{6});
  QCOMPARE(c->literal.values[0], 1.5);
  QCOMPARE(c->literal.values[1], -2.0);
  QCOMPARE(c->literal.values[2], 300.0);
  QVERIFY(std::isinf(c->literal.values[3]));
  QVERIFY(std::isnan(c->literal.values[4]));
  QCOMPARE(e->Find("mask")->literal.values, std::vector<double>({1, 0, 1}));
  QCOMPARE(e->Find("tl")->literal.text, std::string("(1.5, {1, 2})"));  // tuple literal: text only
  QVERIFY(e->Find("tl")->literal.values.empty());

  // Ops outside opcodes.h load as kGeneric with their text, operands and attributes kept.
  Instruction* fft = e->Find("fft");
  QCOMPARE(fft->opcode(), Opcode::kGeneric);
  QCOMPARE(fft->opcode_text(), std::string("fft"));
  QCOMPARE(fft->shape().ToString(), std::string("c64[10,4]"));
  QCOMPARE(fft->operand(0)->name(), std::string("cplx"));
  QCOMPARE(fft->raw_attributes.size(), size_t{2});
  QCOMPARE(fft->raw_attributes[0], (RawAttribute{"fft_type", "FFT"}));
  QCOMPARE(fft->raw_attributes[1], (RawAttribute{"fft_length", "{4}"}));
  Instruction* rbg = e->Find("rbg");
  QCOMPARE(rbg->opcode_text(), std::string("rng-bit-generator"));
  QVERIFY(rbg->shape().IsTuple());
  QCOMPARE(rbg->raw_attributes[0], (RawAttribute{"algorithm", "rng_default"}));
  QCOMPARE(e->Find("tr")->dimensions, std::vector<int64_t>({1, 0}));
}

void TestHloParser::infersOmittedShapes() {
  const char* text = R"(HloModule m
%sum {
  %a = s32[] parameter(0)
  %b = s32[] parameter(1)
  ROOT %t = add(%a, %b)
}
ENTRY %e {
  %p = s32[4,6] parameter(0)
  %z = s32[] constant(0)
  %r = reduce(%p, %z), dimensions={1}, to_apply=%sum
  %c = copy(%r)
  %tr = transpose(%p), dimensions={1,0}
  ROOT %t = tuple(%c, %tr)
}
)";
  auto m = Parse(text);
  QVERIFY(m);
  QCOMPARE(m->FindComputation("sum")->root()->shape().ToString(), std::string("s32[]"));
  QCOMPARE(m->entry()->Find("r")->shape().ToString(false), std::string("s32[4]"));
  QCOMPARE(m->entry()->Find("tr")->shape().ToString(false), std::string("s32[6,4]"));
  QCOMPARE(m->entry()->root()->shape().ToString(false), std::string("(s32[4], s32[6,4])"));
}

void TestHloParser::parsesHeaderlessModule() {
  auto m = Parse("ENTRY %e {\n  %p = f32[32,32] parameter(0)\n  ROOT %c = f32[32,32] cholesky(%p), lower=true\n}\n");
  QVERIFY(m);
  QCOMPARE(m->entry()->root()->opcode_text(), std::string("cholesky"));
  QCOMPARE(m->entry()->root()->raw_attributes[0], (RawAttribute{"lower", "true"}));
  // No ENTRY keyword: the last computation is the entry, as in XLA.
  auto m2 = Parse("HloModule m\n%a {\n  ROOT %p = f32[] parameter(0)\n}\n%b {\n  ROOT %q = f32[] parameter(0)\n}\n");
  QVERIFY(m2);
  QCOMPARE(m2->entry()->name(), std::string("b"));
}

void TestHloParser::parsesRealCorpusModules() {
  const std::string dir = CorpusDir();
  if (!std::filesystem::exists(dir)) QSKIP("conformance corpus not present");
  {
    auto m = Parse(ReadText(dir + "/propagation/WhileGetShardingFromRecvInBody.hlo"));
    QVERIFY(m);
    QCOMPARE(m->computations().size(), size_t{3});
    QCOMPARE(m->entry()->name(), std::string("entry"));
    Instruction* w = m->entry()->Find("while");
    QCOMPARE(w->while_condition()->name(), std::string("cond"));
    QCOMPARE(w->while_body()->name(), std::string("body"));
    Instruction* recv = m->FindInstruction("body/recv");
    QVERIFY(recv);
    QCOMPARE(recv->channel_id.value_or(-1), int64_t{1});
    QVERIFY(recv->sharding()->IsTuple());
    QCOMPARE(recv->sharding()->tuple_elements().size(), size_t{3});
    for (const auto& el : recv->sharding()->tuple_elements()) {
      QVERIFY(el.IsMaximal());
      QCOMPARE(el.maximal_device(), int64_t{1});
    }
    QCOMPARE(recv->shape().ToString(), std::string("(f32[], u32[], token[])"));
  }
  {
    // "add" is defined in %add-call and in the entry: XLA keeps the first and renames the second.
    auto m = Parse(ReadText(dir + "/propagation/Conditional.hlo"));
    QVERIFY(m);
    QCOMPARE(m->FindInstruction("add-call/add")->opcode(), Opcode::kAdd);
    Instruction* cond = m->entry()->Find("conditional");
    QCOMPARE(cond->called_computations()[0]->name(), std::string("true_comp"));
    QCOMPARE(cond->called_computations()[1]->name(), std::string("false_comp"));
    QCOMPARE(m->entry()->Find("true_param")->operand(1)->operand(0)->name(), std::string("broadcast"));
  }
  {
    auto m = Parse(ReadText(dir + "/propagation/GatherForwardPassWithBarrier.hlo"));
    QVERIFY(m);
    Instruction* g = m->entry()->Find("gather");
    QCOMPARE(g->operand(0)->custom_call_target, std::string("ShardBarrierFrom"));
    QCOMPARE(g->operand(0)->raw_attributes[0], (RawAttribute{"custom_call_has_side_effect", "true"}));
    QCOMPARE(g->gather_slice_sizes, std::vector<int64_t>({1, 1, 2, 2}));
    QCOMPARE(m->entry()->Find("concatenate.19")->dimensions, std::vector<int64_t>({0}));
  }
}

void TestHloParser::malformedInputs_data() {
  QTest::addColumn<QByteArray>("text");
  QTest::addColumn<QString>("message");
  QTest::addColumn<bool>("exact");
  QTest::newRow("empty_input") << QByteArray("")
      << QString("bad.hlo:1:1: error: expected 'HloModule' or a computation, found end of input") << true;
  QTest::newRow("not_hlo") << QByteArray("#include <x>\n"
      "")
      << QString("bad.hlo:1:1: error: expected 'HloModule' or a computation, found '#'") << true;
  QTest::newRow("header_without_name") << QByteArray("HloModule")
      << QString("bad.hlo:1:10: error: expected a module name after 'HloModule', found end of input") << true;
  QTest::newRow("no_computation") << QByteArray("HloModule m\n"
      "")
      << QString("bad.hlo:2:1: error: expected a computation, found end of input") << true;
  QTest::newRow("zero_partitions") << QByteArray("HloModule m, num_partitions=0\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %a = f32[4] add(%p, %p)\n"
      "}\n"
      "")
      << QString("bad.hlo:1:29: error: expected a positive integer for num_partitions, found 0") << true;
  QTest::newRow("partitions_not_int") << QByteArray("HloModule m, num_partitions=four\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %a = f32[4] add(%p, %p)\n"
      "}\n"
      "")
      << QString("bad.hlo:1:29: error: expected a positive integer for num_partitions, found 'four'") << true;
  QTest::newRow("duplicate_module_attr") << QByteArray("HloModule m, replica_count=2, replica_count=2\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %a = f32[4] add(%p, %p)\n"
      "}\n"
      "")
      << QString("bad.hlo:1:31: error: duplicate module attribute 'replica_count'") << true;
  QTest::newRow("missing_body_brace") << QByteArray("HloModule m\n"
      "ENTRY %e\n"
      "  %p = f32[4] parameter(0)\n"
      "}\n"
      "")
      << QString("bad.hlo:3:3: error: expected '{' to start the body of computation 'e', found '%p'") << true;
  QTest::newRow("unterminated_computation") << QByteArray("HloModule m\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "")
      << QString("bad.hlo:4:1: error: expected '}' to close computation 'e', found end of input") << true;
  QTest::newRow("empty_computation") << QByteArray("HloModule m\n"
      "ENTRY %e {\n"
      "}\n"
      "")
      << QString("bad.hlo:3:1: error: expected an instruction in computation 'e', found '}'") << true;
  QTest::newRow("missing_equals") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p f32[4] parameter(0)\n"
      "}\n"
      "")
      << QString("bad.hlo:4:6: error: expected '=' after instruction name 'p', found 'f32'") << true;
  QTest::newRow("unclosed_dims") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4 parameter(0)\n"
      "}\n"
      "")
      << QString("bad.hlo:4:14: error: expected ',' or ']' in shape dimensions, found 'parameter'") << true;
  QTest::newRow("unknown_element_type") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f33[4] parameter(0)\n"
      "}\n"
      "")
      << QString("bad.hlo:4:8: error: expected an element type such as f32, bf16, s32 or pred, found 'f33'") << true;
  QTest::newRow("layout_rank_mismatch") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4]{1,0} parameter(0)\n"
      "}\n"
      "")
      << QString("bad.hlo:4:14: error: expected 1 layout entry (one per dimension), found 2") << true;
  QTest::newRow("unbounded_dynamic_dim") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[?] parameter(0)\n"
      "}\n"
      "")
      << QString("bad.hlo:4:12: error: expected a dimension size, found '?' (unbounded dynamic dimensions are not supported)") << true;
  QTest::newRow("missing_opcode") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] (0)\n"
      "}\n"
      "")
      << QString("bad.hlo:4:15: error: expected an opcode, found '('") << true;
  QTest::newRow("missing_paren_after_opcode") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter 0\n"
      "}\n"
      "")
      << QString("bad.hlo:4:25: error: expected '(' after opcode 'parameter', found '0'") << true;
  QTest::newRow("parameter_number_not_int") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(x)\n"
      "}\n"
      "")
      << QString("bad.hlo:4:25: error: expected a parameter number, found 'x'") << true;
  QTest::newRow("duplicate_parameter_number") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  %q = f32[4] parameter(0)\n"
      "  ROOT %a = f32[4] add(%p, %q)\n"
      "}\n"
      "")
      << QString("bad.hlo:5:25: error: duplicate parameter number 0 (first used at 4:25)") << true;
  QTest::newRow("parameter_number_gap") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  %q = f32[4] parameter(2)\n"
      "  ROOT %a = f32[4] add(%p, %q)\n"
      "}\n"
      "")
      << QString("bad.hlo:5:25: error: expected a parameter number below 2 (computation 'e' has 2 parameters), found 2") << true;
  QTest::newRow("undefined_operand") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %a = f32[4] add(%p, %q)\n"
      "}\n"
      "")
      << QString("bad.hlo:5:28: error: expected operand to name an instruction of computation 'e', found undefined 'q'") << true;
  QTest::newRow("operand_defined_later") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  %a = f32[4] add(%p, %b)\n"
      "  ROOT %b = f32[4] negate(%p)\n"
      "}\n"
      "")
      << QString("bad.hlo:5:23: error: expected operand 'b' to be defined before use, found its definition later, at 6:8") << true;
  QTest::newRow("duplicate_instruction") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  %p = f32[4] negate(%p)\n"
      "}\n"
      "")
      << QString("bad.hlo:5:3: error: redefinition of instruction 'p' (first defined at 4:3)") << true;
  QTest::newRow("too_few_operands") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %a = f32[4] add(%p)\n"
      "}\n"
      "")
      << QString("bad.hlo:5:20: error: expected 2 operands for add, found 1") << true;
  QTest::newRow("too_many_operands") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %n = f32[4] negate(%p, %p)\n"
      "}\n"
      "")
      << QString("bad.hlo:5:20: error: expected 1 operand for negate, found 2") << true;
  QTest::newRow("operand_shape_mismatch") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %a = f32[4] add(f32[5] %p, %p)\n"
      "}\n"
      "")
      << QString("bad.hlo:5:24: error: expected operand shape f32[4] (the shape of 'p'), found f32[5]") << true;
  QTest::newRow("unknown_computation") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  %z = f32[] constant(0)\n"
      "  ROOT %r = f32[] reduce(%p, %z), dimensions={0}, to_apply=%nope\n"
      "}\n"
      "")
      << QString("bad.hlo:6:60: error: expected the name of a computation, found unknown computation 'nope'") << true;
  QTest::newRow("duplicate_attribute") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %b = f32[2,4] broadcast(%p), dimensions={1}, dimensions={1}\n"
      "}\n"
      "")
      << QString("bad.hlo:5:53: error: duplicate attribute 'dimensions'") << true;
  QTest::newRow("gte_without_index") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %t = (f32[4], f32[4]) parameter(0)\n"
      "  ROOT %g = f32[4] get-tuple-element(%t)\n"
      "}\n"
      "")
      << QString("bad.hlo:5:20: error: expected attribute index= on get-tuple-element, found none") << true;
  QTest::newRow("broadcast_without_dimensions") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %b = f32[2,4] broadcast(%p)\n"
      "}\n"
      "")
      << QString("bad.hlo:5:22: error: expected attribute dimensions= on broadcast, found none") << true;
  QTest::newRow("bad_comparison_direction") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %c = pred[4] compare(%p, %p), direction=XX\n"
      "}\n"
      "")
      << QString("bad.hlo:5:48: error: expected a comparison direction (EQ, NE, LT, LE, GT, GE), found 'XX'") << true;
  QTest::newRow("bad_bool") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %s = f32[4] sort(%p), dimensions={0}, is_stable=maybe, to_apply=%lt\n"
      "}\n"
      "")
      << QString("bad.hlo:5:56: error: expected true or false, found 'maybe'") << true;
  QTest::newRow("window_count_mismatch") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %l = f32[1,8,8,1] parameter(0)\n"
      "  %k = f32[3,3,1,1] parameter(1)\n"
      "  ROOT %c = f32[1,8,8,1] convolution(%l, %k), window={size=3x3 stride=1}, dim_labels=b01f_01io->b01f\n"
      "}\n"
      "")
      << QString("bad.hlo:6:64: error: expected 2 values for window stride (one per window dimension), found 1") << true;
  QTest::newRow("unknown_window_field") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %l = f32[1,8,8,1] parameter(0)\n"
      "  %k = f32[3,3,1,1] parameter(1)\n"
      "  ROOT %c = f32[1,8,8,1] convolution(%l, %k), window={size=3x3 skew=1x1}, dim_labels=b01f_01io->b01f\n"
      "}\n"
      "")
      << QString("bad.hlo:6:64: error: expected a window field (size, stride, pad, lhs_dilate, rhs_dilate, rhs_reversal), found 'skew'") << true;
  QTest::newRow("bad_dim_labels") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %l = f32[1,8,8,1] parameter(0)\n"
      "  %k = f32[3,3,1,1] parameter(1)\n"
      "  ROOT %c = f32[1,8,8,1] convolution(%l, %k), window={size=3x3}, dim_labels=b01f_01io->bxyf\n"
      "}\n"
      "")
      << QString("bad.hlo:6:77: error: expected dim_labels such as b01f_01io->b01f, found 'b01f_01io->bxyf'") << true;
  QTest::newRow("slice_zero_stride") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %s = f32[2] slice(%p), slice={[0:4:0]}\n"
      "}\n"
      "")
      << QString("bad.hlo:5:43: error: expected a positive slice stride, found 0") << true;
  QTest::newRow("iota_groups_size_mismatch") << QByteArray("HloModule m\n"
      "\n"
      "%sum (x: f32[], y: f32[]) -> f32[] {\n"
      "  %x = f32[] parameter(0)\n"
      "  %y = f32[] parameter(1)\n"
      "  ROOT %s = f32[] add(%x, %y)\n"
      "}\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %r = f32[4] all-reduce(%p), replica_groups=[2,2]<=[3], to_apply=%sum\n"
      "}\n"
      "")
      << QString("bad.hlo:11:51: error: expected iota reshape dimensions with 4 elements, found 3") << true;
  QTest::newRow("iota_groups_bad_permutation") << QByteArray("HloModule m\n"
      "\n"
      "%sum (x: f32[], y: f32[]) -> f32[] {\n"
      "  %x = f32[] parameter(0)\n"
      "  %y = f32[] parameter(1)\n"
      "  ROOT %s = f32[] add(%x, %y)\n"
      "}\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %r = f32[4] all-reduce(%p), replica_groups=[2,2]<=[2,2]T(0,0), to_apply=%sum\n"
      "}\n"
      "")
      << QString("bad.hlo:11:51: error: expected a permutation of the 2 reshape dimensions after T in iota replica groups, found T(0,0)") << true;
  QTest::newRow("unterminated_string") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %c = f32[4] custom-call(%p), custom_call_target=\"abc\n"
      "}\n"
      "")
      << QString("bad.hlo:7:1: error: expected '\"' to close the string started at 5:56, found end of input") << true;
  QTest::newRow("unterminated_comment") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  /* a comment that never ends\n"
      "  ROOT %a = f32[4] add(%p, %p)\n"
      "}\n"
      "")
      << QString("bad.hlo:5:3: error: expected an instruction name or '}', found an unterminated comment") << true;
  QTest::newRow("bad_sharding") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0), sharding={devices=[2]0,1,2}\n"
      "  ROOT %a = f32[4] add(%p, %p)\n"
      "}\n"
      "")
      << QString("bad.hlo:4:") << false;
  QTest::newRow("constant_value_count") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  ROOT %c = f32[4] constant({1, 2, 3})\n"
      "}\n"
      "")
      << QString("bad.hlo:4:29: error: expected 4 values for a f32[4] constant, found 3") << true;
  QTest::newRow("constant_not_a_number") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  ROOT %c = f32[2] constant({1, x})\n"
      "}\n"
      "")
      << QString("bad.hlo:4:33: error: expected a number in the constant, found 'x'") << true;
  QTest::newRow("two_roots") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %a = f32[4] add(%p, %p)\n"
      "  ROOT %b = f32[4] add(%a, %a)\n"
      "}\n"
      "")
      << QString("bad.hlo:6:3: error: expected one ROOT in computation 'e', found a second (the first is at 5:3)") << true;
  QTest::newRow("two_entries") << QByteArray("HloModule m\n"
      "ENTRY %a {\n"
      "  ROOT %p = f32[] parameter(0)\n"
      "}\n"
      "ENTRY %b {\n"
      "  ROOT %p = f32[] parameter(0)\n"
      "}\n"
      "")
      << QString("bad.hlo:5:1: error: expected one ENTRY computation, found a second (the first is 'a')") << true;
  QTest::newRow("computation_redefined") << QByteArray("HloModule m\n"
      "%c {\n"
      "  ROOT %p = f32[] parameter(0)\n"
      "}\n"
      "%c {\n"
      "  ROOT %p = f32[] parameter(0)\n"
      "}\n"
      "")
      << QString("bad.hlo:5:1: error: redefinition of computation 'c' (first defined at 2:1)") << true;
  QTest::newRow("recursive_call") << QByteArray("HloModule m\n"
      "%c {\n"
      "  %p = f32[] parameter(0)\n"
      "  ROOT %r = f32[] call(%p), to_apply=%c\n"
      "}\n"
      "ENTRY %e {\n"
      "  %p = f32[] parameter(0)\n"
      "  ROOT %r = f32[] call(%p), to_apply=%c\n"
      "}\n"
      "")
      << QString("bad.hlo:4:38: error: expected an acyclic call graph, found computation 'c' calling itself (directly or indirectly)") << true;
  QTest::newRow("unbalanced_raw_attribute") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %f = f32[4] fft(%p), fft_length={4, 2\n"
      "}\n"
      "")
      << QString("bad.hlo:7:1: error: expected '}' to close computation 'e', found end of input") << true;
  QTest::newRow("mismatched_closer") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %f = f32[4] fft(%p), fft_length={4)\n"
      "}\n"
      "")
      << QString("bad.hlo:5:42: error: expected '}' to close the '{' at 5:40, found ')'") << true;
  QTest::newRow("generic_without_shape") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %f = fft(%p), fft_type=FFT\n"
      "}\n"
      "")
      << QString("bad.hlo:5:13: error: expected a result shape such as f32[8] before 'fft' (its shape cannot be inferred), found 'fft'") << true;
  QTest::newRow("operand_separator") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %a = f32[4] add(%p %p)\n"
      "}\n"
      "")
      << QString("bad.hlo:5:27: error: expected ',' or ')' in the operand list, found '%p'") << true;
  QTest::newRow("tuple_shape_unclosed") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %t = (f32[], s32[] parameter(0)\n"
      "}\n"
      "")
      << QString("bad.hlo:4:22: error: expected ',' or ')' in tuple shape, found 'parameter'") << true;
  QTest::newRow("signature_without_arrow") << QByteArray("HloModule m\n"
      "ENTRY %e (p: f32[4]) {\n"
      "  ROOT %p = f32[4] parameter(0)\n"
      "}\n"
      "")
      << QString("bad.hlo:2:22: error: expected '->' and the result shape, found '{'") << true;
  QTest::newRow("bad_padding") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  %z = f32[] constant(0)\n"
      "  ROOT %q = f32[6] pad(%p, %z), padding=1x1\n"
      "}\n"
      "")
      << QString("bad.hlo:6:42: error: expected '_' between low and high padding, found 'x1'") << true;
  QTest::newRow("source_target_triple") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %c = f32[4] collective-permute(%p), source_target_pairs={{0,1,2}}\n"
      "}\n"
      "")
      << QString("bad.hlo:5:65: error: expected a {source,target} pair of 2 device ids, found 3") << true;
  QTest::newRow("control_predecessor_undefined") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  ROOT %a = f32[4] add(%p, %p), control-predecessors={%ghost}\n"
      "}\n"
      "")
      << QString("bad.hlo:5:55: error: expected control predecessor to name an instruction of computation 'e', found undefined 'ghost'") << true;
  QTest::newRow("conditional_both_forms") << QByteArray("HloModule m\n"
      "\n"
      "%t {\n"
      "  ROOT %q = f32[] parameter(0)\n"
      "}\n"
      "\n"
      "ENTRY %e {\n"
      "  %b = pred[] parameter(0)\n"
      "  %x = f32[] parameter(1)\n"
      "  ROOT %c = f32[] conditional(%b, %x, %x), true_computation=%t, false_computation=%t, branch_computations={%t, %t}\n"
      "}\n"
      "")
      << QString("bad.hlo:10:19: error: expected either branch_computations= or true_computation=/false_computation= on conditional, found both") << true;
  QTest::newRow("dimension_out_of_int64") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[99999999999999999999] parameter(0)\n"
      "}\n"
      "")
      << QString("bad.hlo:4:12: error: expected a dimension size, found out-of-range integer '99999999999999999999'") << true;
  QTest::newRow("tuple_nested_too_deep") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = ((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((f32[])))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))) parameter(0)\n"
      "}\n"
      "")
      << QString("bad.hlo:4:72: error: tuple shape nested deeper than 64 levels") << true;
  QTest::newRow("stray_byte") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  \xff"" = f32[4] add(%p, %p)\n"
      "}\n"
      "")
      << QString("bad.hlo:5:3: error: expected an instruction name or '}', found byte 0xFF") << true;
  QTest::newRow("inferred_shape_mismatch") << QByteArray("HloModule m\n"
      "\n"
      "ENTRY %e {\n"
      "  %p = f32[4] parameter(0)\n"
      "  %q = f32[5] parameter(1)\n"
      "  ROOT %a = add(%p, %q)\n"
      "}\n"
      "")
      << QString("bad.hlo:6:13: error: expected a result shape before 'add', found none, and it cannot be inferred: ") << false;
}

void TestHloParser::malformedInputs() {
  QFETCH(QByteArray, text);
  QFETCH(QString, message);
  QFETCH(bool, exact);
  const std::string_view view(text.constData(), static_cast<size_t>(text.size()));
  for (bool verify : {false, true}) {
    ParseOptions options;
    options.verify = verify;
    auto r = ParseHloModule(view, "bad.hlo", options);
    QVERIFY2(!r.ok(), "malformed input was accepted");
    const QString got = QString::fromStdString(r.error().message);
    if (exact) QCOMPARE(got, message);
    else QVERIFY2(got.startsWith(message), qPrintable(got));
    std::string why;
    QVERIFY2(ErrorIsWellFormed(view, r.error(), "bad.hlo", &why), why.c_str());
  }
}

void TestHloParser::verifierErrorsArePositioned() {
  // The dot's declared shape is wrong: syntax is fine, the verifier rejects it, and the message
  // points at the instruction name (line 5, column 8).
  const char* text =
      "HloModule v\n"
      "ENTRY %e {\n"
      "  %a = f32[8,16] parameter(0)\n"
      "  %b = f32[16,4] parameter(1)\n"
      "  ROOT %d = f32[8,8] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "}\n";
  QVERIFY(Parse(text, /*verify=*/false));
  auto r = ParseHloModule(text, "v.hlo");
  QVERIFY(!r.ok());
  QVERIFY2(r.error().message.rfind("v.hlo:5:8: error: ", 0) == 0, r.error().message.c_str());
  QVERIFY2(r.error().message.find("d") != std::string::npos, r.error().message.c_str());
  QCOMPARE(r.error().message.find('\n'), std::string::npos);
}

void TestHloParser::shardingErrorsPointIntoTheFile() {
  // The sharding sub-parser reports offsets relative to "{...}"; the HLO parser moves them into
  // the file, so the column lands inside the sharding text on line 3.
  const std::string text =
      "HloModule s\n"
      "ENTRY %e {\n"
      "  ROOT %p = f32[4,4] parameter(0), sharding={devices=[2,2]0,1,2}\n"
      "}\n";
  auto r = ParseHloModule(text, "s.hlo");
  QVERIFY(!r.ok());
  const int64_t start = static_cast<int64_t>(text.find("{devices"));
  const int64_t end = static_cast<int64_t>(text.find("\n}"));
  QVERIFY2(r.error().offset >= start && r.error().offset <= end, r.error().message.c_str());
  std::string why;
  QVERIFY2(ErrorIsWellFormed(text, r.error(), "s.hlo", &why), why.c_str());
  QVERIFY2(r.error().message.rfind("s.hlo:3:", 0) == 0, r.error().message.c_str());
}

void TestHloParser::roundTripsEmbeddedModules() {
  for (const char* text : {kMlp, kControl, kArrayOps}) {
    auto a = Parse(text);
    QVERIFY(a);
    const std::string printed = PrintHloModule(*a);
    auto b = Parse(printed);
    QVERIFY2(b, printed.c_str());
    std::string why;
    QVERIFY2(ModulesEqual(*a, *b, &why), why.c_str());
    QCOMPARE(PrintHloModule(*b), printed);  // the canonical text is a fixpoint
    auto c = a->Clone();
    QVERIFY2(ModulesEqual(*a, *c, &why), why.c_str());
  }
}

void TestHloParser::printsCanonicalInstructions() {
  auto m = Parse(kMlp);
  QVERIFY(m);
  Computation* e = m->entry();
  QCOMPARE(PrintInstruction(*e->Find("b")), std::string("%b = f32[8,32]{1,0} broadcast(%bias), dimensions={1}"));
  const std::string dot = PrintInstruction(*e->Find("dot"));
  QVERIFY2(dot.rfind("%dot = f32[8,32]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
                     "operand_precision={highest,highest}, sharding={",
                     0) == 0,
           dot.c_str());
  auto c = Parse(kControl);
  QVERIFY(c);
  QCOMPARE(PrintInstruction(*c->entry()->Find("loop")),
           std::string("%loop = (s32[], f32[4]) while(%init), condition=%cond, body=%body, "
                       "backend_config={\"known_trip_count\":{\"n\":\"10\"}}"));
  QCOMPARE(PrintInstruction(*c->FindComputation("body")->root()->operand(1)->operand(0)),
           std::string("%ar = f32[4] all-reduce(%v), channel_id=3, replica_groups=[2,4]<=[4,2]T(1,0), "
                       "use_global_device_ids=true, to_apply=%sum"));
  auto a = Parse(kArrayOps);
  QVERIFY(a);
  QCOMPARE(PrintInstruction(*a->entry()->Find("conv")),
           std::string("%conv = f32[1,4,4,16] convolution(%img, %k), window={size=3x3 stride=2x2 pad=1_1x1_1}, "
                       "dim_labels=b01f_01io->b01f"));
  QCOMPARE(PrintInstruction(*a->entry()->Find("sl")), std::string("%sl = f32[4,4] slice(%sc), slice={[0:8:2], [0:4]}"));
  QCOMPARE(PrintInstruction(*a->entry()->Find("padded")),
           std::string("%padded = f32[6,9] pad(%sl, %zero), padding=1_1_0x0_1_1"));
  QCOMPARE(PrintInstruction(*a->entry()->Find("fft")),
           std::string("%fft = c64[10,4] fft(%cplx), fft_type=FFT, fft_length={4}"));
  QCOMPARE(PrintInstruction(*a->entry()->Find("g")),
           std::string("%g = f32[5,4] gather(%table, %idx), offset_dims={1}, collapsed_slice_dims={0}, "
                       "start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}, indices_are_sorted=true"));
}

void TestHloParser::printerOptions() {
  auto m = Parse(kMlp);
  QVERIFY(m);
  PrintOptions o;
  o.print_layouts = false;
  o.print_metadata = false;
  const std::string text = PrintHloModule(*m, o);
  QVERIFY(text.find("{1,0}") == std::string::npos || text.find("entry_computation_layout") != std::string::npos);
  QVERIFY(text.find("f32[8,16]{1,0} parameter") == std::string::npos);
  QVERIFY(text.find("metadata=") == std::string::npos);
  auto back = Parse(text);
  QVERIFY(back);
  QVERIFY(!back->entry()->Find("x")->shape().has_layout);
  QVERIFY(back->entry()->Find("x")->metadata.empty());

  auto c = Parse(kControl);
  QVERIFY(c);
  PrintOptions nb;
  nb.print_backend_config = false;
  const std::string t2 = PrintHloModule(*c, nb);
  QVERIFY(t2.find("backend_config") == std::string::npos);
  QVERIFY(PrintHloModule(*c).find("backend_config=\"unspecified_dims=[0]\"") != std::string::npos);
}

void TestHloParser::modulesEqualReportsDifferences() {
  auto a = Parse(kMlp);
  auto b = Parse(kMlp);
  QVERIFY(a && b);
  std::string why;
  QVERIFY(ModulesEqual(*a, *b, &why));
  b->entry()->root()->dimensions = {0};
  QVERIFY(!ModulesEqual(*a, *b, &why));
  QVERIFY2(why.find("reduce") != std::string::npos && why.find("dimensions") != std::string::npos, why.c_str());
  b = Parse(kMlp);
  b->entry()->Find("w")->set_sharding(HloSharding::Replicate());
  QVERIFY(!ModulesEqual(*a, *b, &why));
  QVERIFY2(why.find("sharding") != std::string::npos, why.c_str());
  b = Parse(kMlp);
  b->num_partitions = 8;
  QVERIFY(!ModulesEqual(*a, *b, &why));
  QVERIFY2(why.find("num_partitions") != std::string::npos, why.c_str());
  // Shardings compare semantically: an explicit device list equals the same iota form.
  b = Parse(kMlp);
  b->entry()->Find("w")->set_sharding(*HloSharding::Parse("{devices=[1,4]0,1,2,3}"));
  QVERIFY2(ModulesEqual(*a, *b, &why), why.c_str());
}

namespace {

std::vector<std::string> FuzzSeeds() {
  std::vector<std::string> seeds = {kMlp, kControl, kArrayOps};
  const std::string dir = CorpusDir();
  for (const char* f : {"/propagation/WhileGetShardingFromRecvInBody.hlo", "/propagation/Conditional.hlo",
                        "/spmd/DynamicUpdateSliceOfSliceUpdateSingleShardFree.hlo"})
    if (std::filesystem::exists(dir + f)) seeds.push_back(ReadText(dir + f));
  return seeds;
}

}  // namespace

void TestHloParser::fuzzPrefixes() {
  int64_t ok = 0, failed = 0;
  for (const std::string& seed : FuzzSeeds()) {
    for (size_t n = 0; n <= seed.size(); ++n) {
      const std::string_view prefix(seed.data(), n);
      ParseOptions options;
      options.verify = (n % 7 == 0);
      auto r = ParseHloModule(prefix, "prefix.hlo", options);
      if (r.ok()) {
        ++ok;
        continue;
      }
      ++failed;
      std::string why;
      QVERIFY2(ErrorIsWellFormed(prefix, r.error(), "prefix.hlo", &why), why.c_str());
    }
  }
  // Only prefixes that end right after a complete computation can parse.
  QVERIFY(failed > 1000);
  QVERIFY(ok > 0);
}

void TestHloParser::fuzzMutations() {
  const std::vector<std::string> seeds = FuzzSeeds();
  const std::vector<std::string> snippets = {"{", "}", "(", ")", "[", "]", ",", "=", "%", "\"", "/*", "//", "\n",
                                             "ROOT ", "ENTRY ", "f32[", "<=", "->", "0", "-1", "99999999999999999999",
                                             "sharding={", "to_apply=%", "parameter(", "constant(", "tuple(", "x",
                                             "T(", "{devices=[2]0,1}", "((((((((", "\xff", std::string(1, '\0')};
  std::mt19937_64 rng(20240517);
  int64_t parsed = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !text.empty(); ++k) {
      const size_t pos = rng() % (text.size() + 1);
      switch (rng() % 5) {
        case 0:  // delete a run
          text.erase(std::min(pos, text.size()), 1 + rng() % 12);
          break;
        case 1:  // insert a snippet
          text.insert(std::min(pos, text.size()), snippets[rng() % snippets.size()]);
          break;
        case 2:  // overwrite a byte
          if (pos < text.size()) text[pos] = static_cast<char>(rng() % 256);
          break;
        case 3: {  // duplicate a line
          const size_t b = text.rfind('\n', pos == 0 ? 0 : pos - 1);
          const size_t e = text.find('\n', pos);
          const size_t from = b == std::string::npos ? 0 : b + 1;
          if (e != std::string::npos && e > from) text.insert(e + 1, text.substr(from, e - from + 1));
          break;
        }
        default: {  // swap two bytes
          const size_t other = rng() % text.size();
          if (pos < text.size()) std::swap(text[pos], text[other]);
        }
      }
    }
    ParseOptions options;
    options.verify = (iter % 2 == 0);
    auto r = ParseHloModule(text, "mutant.hlo", options);
    if (r.ok()) {
      ++parsed;
      // Whatever parsed must print and reparse.
      auto again = ParseHloModule(PrintHloModule(**r), "printed.hlo", ParseOptions{false});
      QVERIFY2(again.ok(), again.ok() ? "" : again.error().message.c_str());
      continue;
    }
    std::string why;
    QVERIFY2(ErrorIsWellFormed(text, r.error(), "mutant.hlo", &why), why.c_str());
  }
  QVERIFY(parsed < 3000);
}

void TestHloParser::fuzzRandomBytes() {
  std::mt19937_64 rng(7);
  const std::string alphabet = "HloModule ENTRY ROOT %=,(){}[]<>:-.0123456789 f32 s32 pred \n\"/*";
  for (int iter = 0; iter < 1000; ++iter) {
    std::string text(rng() % 400, '\0');
    for (char& c : text)
      c = (iter % 2) ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()];
    if (iter % 3 == 0) text = "HloModule r\nENTRY %e {\n" + text;
    auto r = ParseHloModule(text, "random.hlo", ParseOptions{false});
    if (r.ok()) continue;
    std::string why;
    QVERIFY2(ErrorIsWellFormed(text, r.error(), "random.hlo", &why), why.c_str());
  }
  // Deep nesting cannot exhaust the stack.
  for (const std::string& deep :
       {std::string("HloModule d\nENTRY %e {\n  %p = ") + std::string(100000, '(') + "f32[] parameter(0)\n}\n",
        std::string("HloModule d\nENTRY %e {\n  %p = f32[] parameter(0), sharding=") + std::string(100000, '{') +
            std::string(100000, '}') + "\n}\n",
        std::string("HloModule d\nENTRY %e {\n  %p = f32[] constant(") + std::string(100000, '{') + "\n}\n"}) {
    auto r = ParseHloModule(deep, "deep.hlo", ParseOptions{false});
    QVERIFY(!r.ok());
    std::string why;
    QVERIFY2(ErrorIsWellFormed(deep, r.error(), "deep.hlo", &why), why.c_str());
  }
}

void TestHloParser::cliCheckAndPrint() {
  const QString cli = QString::fromUtf8(SHARDSCOPE_CLI_PATH);
  if (!QFileInfo::exists(cli)) QSKIP("shardscope-cli not built");
  QTemporaryDir dir;
  QVERIFY(dir.isValid());
  const QString good = dir.filePath("control.hlo");
  const QString bad = dir.filePath("bad.hlo");
  const QString out = dir.filePath("out.hlo");
  {
    std::ofstream(good.toStdString()) << kControl;
    std::ofstream(bad.toStdString()) << "HloModule b\nENTRY %e {\n  %p = f32[4] parameter(0)\n  ROOT %a = f32[4] add(%p, %q)\n}\n";
  }
  QProcess p;
  p.start(cli, {"check", good});
  QVERIFY(p.waitForFinished(60000));
  QCOMPARE(p.exitCode(), 0);
  const QString summary = QString::fromUtf8(p.readAllStandardOutput());
  QVERIFY2(summary.contains("num_partitions: 8"), qPrintable(summary));
  QVERIFY2(summary.contains("computations:   7 (entry: entry)"), qPrintable(summary));
  QVERIFY2(summary.contains("instructions:   33"), qPrintable(summary));
  QVERIFY2(summary.contains("annotated:      2 instructions"), qPrintable(summary));
  QVERIFY2(summary.contains("parameter 10"), qPrintable(summary));

  p.start(cli, {"check", bad});
  QVERIFY(p.waitForFinished(60000));
  QCOMPARE(p.exitCode(), 2);
  const QString err = QString::fromUtf8(p.readAllStandardError()).trimmed();
  QCOMPARE(err, bad + ":4:28: error: expected operand to name an instruction of computation 'e', found undefined 'q'");

  p.start(cli, {"print", good, "-o", out});
  QVERIFY(p.waitForFinished(60000));
  QCOMPARE(p.exitCode(), 0);
  auto original = Parse(kControl);
  auto printed = Parse(ReadText(out.toStdString()));
  QVERIFY(original && printed);
  std::string why;
  QVERIFY2(ModulesEqual(*original, *printed, &why), why.c_str());

  p.start(cli, {"print", dir.filePath("missing.hlo")});
  QVERIFY(p.waitForFinished(60000));
  QCOMPARE(p.exitCode(), 2);
}

QTEST_APPLESS_MAIN(TestHloParser)
#include "test_hlo_parser.moc"
