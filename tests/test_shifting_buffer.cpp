// The shifting buffer the teaching panel steps through (app/pipeline/shifting_buffer.h; GSPMD §3.3):
// which microbatch each stage holds before and after each iteration's shift, the shift's
// collective-permute pairs, and the bubble iterations — for GPipe (4 stages x 6 microbatches) and
// the circular schedule (4 stages x 4 microbatches x 2 rounds), and from a zoo module's settings.
#include <QtTest/QtTest>

#include <string>
#include <utility>
#include <vector>

#include "simulator/pipeline_shifting_buffer.h"
#include "app/pipeline/sources.h"
#include "simulator/pipeline_accounting.h"

using namespace shardscope;
using namespace shardscope::sim;
using shardscope::pipeline::BuildZooModel;

namespace {

constexpr int64_t P = -1;  // padding

std::vector<int64_t> Microbatches(const std::vector<BufferSlot>& held) {
  std::vector<int64_t> out;
  for (const BufferSlot& s : held) out.push_back(s.padding() ? P : s.microbatch);
  return out;
}

using Pairs = std::vector<std::pair<int64_t, int64_t>>;

}  // namespace

class TestShiftingBuffer : public QObject {
  Q_OBJECT

 private slots:
  // GPipe, L = 4 stages on mesh (L, X) = (4, 2), N = 6 microbatches: T = N + L - 1 = 9 iterations.
  // After iteration t's shift stage s holds microbatch t - s; stage 0 takes the next microbatch and
  // the last stage's result leaves the buffer (the pad + slice shift: a chain, no pair into stage 0).
  void gpipeFourStagesSixMicrobatches() {
    ShiftingBufferSettings s;
    s.stages = 4;
    s.microbatches = 6;
    s.mesh = DeviceMesh({{"L", 4}, {"X", 2}});
    s.stage_axis = 0;
    auto plan = PlanShiftingBuffer(s);
    QVERIFY2(plan.ok(), plan.ok() ? "" : plan.error().message.c_str());
    QCOMPARE(plan->trips, int64_t{9});
    QCOMPARE(plan->iterations.size(), size_t{9});
    QCOMPARE(plan->devices_of_stage, (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
    const std::vector<std::vector<int64_t>> after = {
        {0, P, P, P}, {1, 0, P, P}, {2, 1, 0, P}, {3, 2, 1, 0}, {4, 3, 2, 1},
        {5, 4, 3, 2}, {P, 5, 4, 3}, {P, P, 5, 4}, {P, P, P, 5}};
    for (size_t t = 0; t < after.size(); ++t) {
      const ShiftingBufferIteration& it = plan->iterations[t];
      QCOMPARE(it.iteration, static_cast<int64_t>(t));
      QCOMPARE(Microbatches(it.after), after[t]);
      QCOMPARE(Microbatches(it.before), (t == 0 ? std::vector<int64_t>{P, P, P, P} : after[t - 1]));
      for (int64_t st = 0; st < 4; ++st) {
        QCOMPARE(static_cast<bool>(it.bubble[static_cast<size_t>(st)]), after[t][static_cast<size_t>(st)] == P);
        // The same rule as the simulator's bubble accounting.
        QCOMPARE(static_cast<bool>(it.bubble[static_cast<size_t>(st)]), PaddedIteration(st, 4, 9, static_cast<int64_t>(t)));
      }
      QCOMPARE(it.stage_pairs, (Pairs{{0, 1}, {1, 2}, {2, 3}}));
      // One collective-permute: every X column shifts along L (devices d = 2l + x).
      QCOMPARE(it.device_pairs, (Pairs{{0, 2}, {1, 3}, {2, 4}, {3, 5}, {4, 6}, {5, 7}}));
    }
    // Each stage: L - 1 = 3 bubble iterations of 9 (GSPMD: (L-1)/(N+L-1)).
    for (int64_t st = 0; st < 4; ++st) {
      int n = 0;
      for (const auto& it : plan->iterations) n += it.bubble[static_cast<size_t>(st)];
      QCOMPARE(n, 3);
    }
    QCOMPARE(plan->SlotText(plan->iterations[3].after[1]), std::string("microbatch 2"));
    QCOMPARE(plan->SlotText(plan->iterations[0].after[1]), std::string("padding"));
  }

  // Circular, L = 4, N = 4, R = 2 layers per stage (round-robin: stage l holds layers l and l + 4):
  // T = N*R + L - 1 = 11. The shift is a rotation (a ring: 3 -> 0), so microbatch 0 leaving stage 3
  // after its first round (layer 3) re-enters stage 0 for round 1 (layer 4) in iteration 4.
  void circularFourStages() {
    ShiftingBufferSettings s;
    s.stages = 4;
    s.microbatches = 4;
    s.layers_per_stage = 2;
    s.circular = true;
    auto plan = PlanShiftingBuffer(s);
    QVERIFY2(plan.ok(), plan.ok() ? "" : plan.error().message.c_str());
    QCOMPARE(plan->trips, int64_t{11});
    const ShiftingBufferIteration& it4 = plan->iterations[4];
    QCOMPARE(it4.stage_pairs, (Pairs{{0, 1}, {1, 2}, {2, 3}, {3, 0}}));
    QCOMPARE(it4.device_pairs, (Pairs{{0, 1}, {1, 2}, {2, 3}, {3, 0}}));
    QCOMPARE(Microbatches(it4.before), (std::vector<int64_t>{3, 2, 1, 0}));
    QCOMPARE(Microbatches(it4.after), (std::vector<int64_t>{0, 3, 2, 1}));
    QCOMPARE(it4.before[3], (BufferSlot{0, 0, 0, 3}));
    QCOMPARE(it4.after[0], (BufferSlot{4, 0, 1, 4}));
    QCOMPARE(plan->SlotText(it4.after[0]), std::string("microbatch 0 (round 1, layer 4)"));
    QCOMPARE(Microbatches(plan->iterations[0].after), (std::vector<int64_t>{0, P, P, P}));
    QCOMPARE(Microbatches(plan->iterations[10].after), (std::vector<int64_t>{P, P, P, 3}));
    QCOMPARE(plan->iterations[10].after[3].layer, int64_t{7});
    // Still L - 1 bubble iterations per stage, now of N*R + L - 1.
    for (int64_t st = 0; st < 4; ++st) {
      int n = 0;
      for (const auto& it : plan->iterations) n += it.bubble[static_cast<size_t>(st)];
      QCOMPARE(n, 3);
    }
  }

  void badSettingsAreErrors() {
    ShiftingBufferSettings s;
    s.stages = 1;
    s.microbatches = 4;
    QVERIFY(!PlanShiftingBuffer(s).ok());
    s.stages = 4;
    s.circular = true;
    s.microbatches = 2;
    auto r = PlanShiftingBuffer(s);
    QVERIFY(!r.ok());
    QVERIFY(r.error().message.find("microbatches") != std::string::npos);
    s.circular = false;
    s.mesh = DeviceMesh({{"L", 2}, {"X", 2}});
    s.stage_axis = 0;
    QVERIFY(!PlanShiftingBuffer(s).ok());  // the axis has 2 devices, not 4 stages
  }

  // The zoo module's microbatch count (its input x [N, mb, S, M]).
  void microbatchesOfTheZooModule() {
    auto m = BuildZooModel("pipelined-transformer", {{"stages", "2"}, {"mesh_x", "1"}, {"mesh_y", "2"}, {"microbatches", "3"},
                                                      {"layers", "4"}, {"seq", "4"}, {"model", "8"}, {"heads", "2"},
                                                      {"head_dim", "4"}, {"hidden", "16"}});
    QVERIFY2(m.ok(), m.ok() ? "" : m.error().message.c_str());
    auto n = PipelineMicrobatches(*m->module);
    QVERIFY(n.ok());
    QCOMPARE(*n, int64_t{3});
    auto t = BuildZooModel("transformer", {});
    QVERIFY(t.ok());
    QVERIFY(!PipelineMicrobatches(*t->module).ok());
  }
};

QTEST_MAIN(TestShiftingBuffer)
#include "test_shifting_buffer.moc"
