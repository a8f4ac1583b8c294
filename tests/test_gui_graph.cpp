// The graph view's layout and structure: Graphviz dot positions (run by the one layout owner),
// name-scope clusters that collapse and expand, search, and the fallback layout.
#include <QtTest>

#include "views/document.h"
#include "views/graph_layout.h"
#include "views/graph_structure.h"
#include "views/graph_view.h"

using namespace shardscope;
using namespace shardscope::views;

namespace {

const bool kOffscreen = [] {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  return true;
}();

// Two "layers" of name scopes (metadata op_name) under a shared jit(...) prefix.
const char* kScoped = R"(HloModule scoped, num_partitions=4

ENTRY main {
  x = f32[8,16] parameter(0), metadata={op_name="jit(f)/input"}
  w0 = f32[16,16] parameter(1), metadata={op_name="jit(f)/layer0/w"}
  d0 = f32[8,16] dot(x, w0), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(f)/layer0/ffn/dot"}
  t0 = f32[8,16] tanh(d0), metadata={op_name="jit(f)/layer0/ffn/tanh"}
  w1 = f32[16,16] parameter(2), metadata={op_name="jit(f)/layer1/w"}
  d1 = f32[8,16] dot(t0, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(f)/layer1/ffn/dot"}
  ROOT t1 = f32[8,16] tanh(d1), metadata={op_name="jit(f)/layer1/ffn/tanh"}
}
)";

LayoutInput Chain(int n) {
  LayoutInput in;
  for (int i = 0; i < n; ++i) in.nodes.push_back({"n" + std::to_string(i), 100, 40, ""});
  for (int i = 0; i + 1 < n; ++i) in.edges.push_back({"n" + std::to_string(i), "n" + std::to_string(i + 1)});
  in.nodes.push_back({"side", 80, 40, ""});
  in.edges.push_back({"n0", "side"});
  return in;
}

void CheckLayout(const LayoutResult& r, const LayoutInput& in) {
  QVERIFY2(r.ok, r.error.c_str());
  QCOMPARE(r.nodes.size(), in.nodes.size());
  QCOMPARE(r.edges.size(), in.edges.size());
  for (const auto& n : in.nodes) {
    const LayoutBox& b = r.nodes.at(n.key);
    QCOMPARE(b.w, n.width);  // fixed sizes are kept
    QCOMPARE(b.h, n.height);
    QVERIFY(b.x >= -1 && b.y >= -1 && b.x + b.w <= r.width + 1 && b.y + b.h <= r.height + 1);
  }
  // Top to bottom: every edge's tail is above its head; no two nodes overlap.
  for (const auto& e : in.edges) QVERIFY(r.nodes.at(e.tail).y + r.nodes.at(e.tail).h <= r.nodes.at(e.head).y);
  for (const auto& a : in.nodes) {
    for (const auto& b : in.nodes) {
      if (a.key >= b.key) continue;
      const LayoutBox &p = r.nodes.at(a.key), &q = r.nodes.at(b.key);
      const bool overlap = p.x < q.x + q.w && q.x < p.x + p.w && p.y < q.y + q.h && q.y < p.y + p.h;
      QVERIFY2(!overlap, (a.key + " overlaps " + b.key).c_str());
    }
  }
  // Edge paths start near the tail and end (arrow tip) near the head.
  for (const auto& e : r.edges) {
    QVERIFY(e.points.size() >= 4);
    QCOMPARE((e.points.size() - 1) % 3, size_t{0});
    const LayoutBox& head = r.nodes.at(e.head);
    const auto tip = e.has_arrow ? e.arrow_tip : e.points.back();
    QVERIFY(std::abs(tip.second - head.y) < 3);
  }
}

}  // namespace

class TestGuiGraph : public QObject {
  Q_OBJECT

 private slots:
  void graphvizDot() {
    const LayoutInput in = Chain(5);
    const LayoutResult r = LayoutWithGraphviz(in);
    QCOMPARE(r.engine, std::string("dot"));
    CheckLayout(r, in);
  }

  void graphvizClusters() {
    LayoutInput in = Chain(4);
    in.clusters.push_back({"c", "", "scope"});
    in.clusters.push_back({"inner", "c", "inner"});
    in.nodes[1].cluster = "c";
    in.nodes[2].cluster = "inner";
    const LayoutResult r = LayoutWithGraphviz(in);
    CheckLayout(r, in);
    QCOMPARE(r.clusters.size(), size_t{2});
    const LayoutBox& c = r.clusters.at("c");
    const LayoutBox& inner = r.clusters.at("inner");
    for (const char* key : {"n1", "n2"}) {
      const LayoutBox& b = r.nodes.at(key);
      QVERIFY(b.x >= c.x && b.y >= c.y && b.x + b.w <= c.x + c.w && b.y + b.h <= c.y + c.h);
    }
    const LayoutBox& n2 = r.nodes.at("n2");
    QVERIFY(n2.x >= inner.x && n2.x + n2.w <= inner.x + inner.w);
    QVERIFY(inner.x >= c.x && inner.x + inner.w <= c.x + c.w);
  }

  void layeredFallback() {
    const LayoutInput in = Chain(6);
    const LayoutResult r = LayoutLayered(in);
    CheckLayout(r, in);
  }

  void scopeTree() {
    Document doc;
    QVERIFY(doc.loadHloText(kScoped, "scoped.hlo").ok());
    const ScopeTree tree = ScopeTree::Build(*doc.module()->entry());
    // jit(f) is shared by everything and dropped: root -> {layer0, layer1}; layer*/ffn nested.
    QCOMPARE(tree.scope(0).total, int64_t{7});
    QCOMPARE(tree.scope(0).children.size(), size_t{2});
    const ScopeNode& layer0 = tree.scope(tree.scope(0).children[0]);
    QCOMPARE(layer0.label, std::string("layer0"));
    QCOMPARE(layer0.total, int64_t{3});
    QCOMPARE(tree.scope(layer0.children[0]).path, std::string("layer0/ffn"));
    QCOMPARE(tree.scopeOf(doc.findInstruction("x")->id()), 0);
    // A budget of 3 visible nodes: x + two collapsed layers.
    const auto small = tree.defaultExpansion(3);
    QCOMPARE(small, std::set<int>{0});
    auto shared = std::make_shared<const ScopeTree>(tree);
    const VisibleTree g(shared, ViewState{small});
    QCOMPARE(g.visibleNodes().size(), size_t{3});  // x, layer0, layer1
    QCOMPARE(g.keyFor(doc.findInstruction("t0")->id()), GroupKey(tree.scope(0).children[0]));
    QCOMPARE(g.keyFor(doc.findInstruction("x")->id()), InstructionKey(doc.findInstruction("x")->id()));
    // x -> layer0 -> layer1 at the top; inside layer0: w0 -> ffn.
    QCOMPARE(tree.slotEdges(0).size(), size_t{2});
    const VisibleTree full(shared, ViewState{tree.allExpanded()});
    QCOMPARE(full.visibleNodes().size(), size_t{7});
    QCOMPARE(full.openScopes().size(), size_t{5});  // root, layer0, layer0/ffn, layer1, layer1/ffn
  }

  void collapseExpandAndSearch() {
    Document doc;
    GraphView view;
    view.resize(900, 700);
    view.setDocument(&doc);
    QVERIFY(doc.loadHloText(kScoped, "scoped.hlo").ok());
    QVERIFY(view.waitForLayout(60000));
    QCOMPARE(view.nodes().size(), 7);  // small graphs start fully expanded
    const int64_t t0 = doc.findInstruction("t0")->id();
    QVERIFY(view.nodeForInstruction(t0));
    const int layer0 = view.scopeTree()->scope(0).children[0];
    view.collapseScope(layer0);
    QVERIFY(view.waitForLayout(60000));
    QCOMPARE(view.nodes().size(), 5);  // x, layer0 group, w1, d1, t1
    QVERIFY(!view.nodeForInstruction(t0));
    GraphNodeItem* group = view.nodeForKey(GroupKey(layer0));
    QVERIFY(group && group->isGroup());
    QVERIFY(group->look().lines.join(" ").contains("3 instructions"));
    // Search finds hidden instructions; revealing expands their scope again.
    const QList<int64_t> hits = view.setSearch("tanh");
    QCOMPARE(hits.size(), 2);
    view.reveal(t0);
    QVERIFY(view.waitForLayout(60000));
    QVERIFY(view.nodeForInstruction(t0));
    QCOMPARE(view.nodes().size(), 7);
    QCOMPARE(view.setSearch("layer1").size(), 0);  // names and opcodes, not scopes
    QCOMPARE(view.setSearch("w").size(), 2);       // w0, w1
    view.collapseAll();
    QVERIFY(view.waitForLayout(60000));
    QCOMPARE(view.nodes().size(), 3);
    view.expandAll();
    QVERIFY(view.waitForLayout(60000));
    QCOMPARE(view.nodes().size(), 7);
  }
};

QTEST_MAIN(TestGuiGraph)
#include "test_gui_graph.moc"
