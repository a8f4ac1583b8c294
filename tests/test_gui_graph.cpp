// The graph view's layout and structure: Graphviz dot positions (on the job tracker's layout lane),
// the tree of groups (name scopes, called computations, chunks of the topological order), repeated
// groups folded into one node, the hierarchical layout (each open group laid out alone, cached,
// cancelled when superseded, edges bundled), search and reveal, and the fallback layout.
#include <QtTest>
#include <QLineEdit>

#include "gui_test_support.h"
#include "core/ir/hlo_text.h"
#include "core/zoo/zoo.h"
#include "views/document_model.h"
#include "views/graph_layout.h"
#include "views/graph_structure.h"
#include "views/graph_view.h"

using namespace shardscope;
using namespace shardscope::views;
using shardscope::gui::Session;
using shardscope::gui::WaitForLayout;
using shardscope::gui::WaitUntilIdle;

namespace {

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

// `n` identical layers (a dot on a weight, tanh, a residual add) scoped layer<l>/ffn and layer<l>;
// the weights carry no metadata. Layer `odd` (if any) has its dot sharded unlike the others.
std::string Stack(int n, int odd = -1) {
  std::string t = "HloModule stack, num_partitions=4\n\nENTRY main {\n";
  t += "  x = f32[8,16] parameter(0), metadata={op_name=\"jit(f)/input\"}\n";
  std::string h = "x";
  for (int l = 0; l < n; ++l) {
    const std::string L = std::to_string(l), scope = "jit(f)/layer" + L;
    const std::string sharding = l == odd ? "{replicated}" : "{devices=[4,1]<=[4]}";
    t += "  w" + L + " = f32[16,16] parameter(" + std::to_string(l + 1) + ")\n";
    t += "  d" + L + " = f32[8,16] dot(" + h + ", w" + L + "), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding=" +
         sharding + ", metadata={op_name=\"" + scope + "/ffn/dot\"}\n";
    t += "  t" + L + " = f32[8,16] tanh(d" + L + "), metadata={op_name=\"" + scope + "/ffn/tanh\"}\n";
    t += std::string(l + 1 == n ? "  ROOT " : "  ") + "a" + L + " = f32[8,16] add(t" + L + ", " + h +
         "), metadata={op_name=\"" + scope + "/residual\"}\n";
    h = "a" + L;
  }
  return t + "}\n";
}

// No metadata: a chain of 100 adds, then a while loop.
std::string Loop() {
  std::string t = R"(HloModule loop

cond {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[8] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  v2 = f32[8] tanh(v)
  ROOT t = (s32[], f32[8]) tuple(i2, v2)
}

ENTRY main {
  a0 = f32[8] parameter(0)
)";
  for (int i = 1; i <= 100; ++i)
    t += "  a" + std::to_string(i) + " = f32[8] add(a" + std::to_string(i - 1) + ", a" + std::to_string(i - 1) + ")\n";
  t += R"(  zero = s32[] constant(0)
  init = (s32[], f32[8]) tuple(zero, a100)
  w = (s32[], f32[8]) while(init), condition=cond, body=body
  ROOT r = f32[8] get-tuple-element(w), index=1
}
)";
  return t;
}

bool Inside(const QRectF& inner, const QRectF& outer) { return outer.adjusted(-0.5, -0.5, 0.5, 0.5).contains(inner); }

const HierarchyEdge* FindEdge(const HierarchyLayout& l, const std::string& tail, const std::string& head) {
  for (const auto& e : l.edges)
    if (e.tail == tail && e.head == head) return &e;
  return nullptr;
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
    Session session;
    const DocumentModel& doc = *session.document();
    QVERIFY(session.loadHloText(kScoped, "scoped.hlo").ok());
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
    const VisibleTree g(shared, ViewState{.expanded = small, .fold_repeats = true, .unfolded = {}});
    QCOMPARE(g.visibleNodes().size(), size_t{3});  // x, layer0, layer1
    QCOMPARE(g.keyFor(doc.findInstruction("t0")->id()), GroupKey(tree.scope(0).children[0]));
    QCOMPARE(g.keyFor(doc.findInstruction("x")->id()), InstructionKey(doc.findInstruction("x")->id()));
    // x -> layer0 -> layer1 at the top; inside layer0: w0 -> ffn.
    QCOMPARE(tree.slotEdges(0).size(), size_t{2});
    const VisibleTree full(shared, ViewState{.expanded = tree.allExpanded(), .fold_repeats = true, .unfolded = {}});
    QCOMPARE(full.visibleNodes().size(), size_t{7});
    QCOMPARE(full.openScopes().size(), size_t{5});  // root, layer0, layer0/ffn, layer1, layer1/ffn
  }

  // A partitioned program reads each output of the original (unscoped) root tuple back with a
  // get-tuple-element the partitioner emits without a scope; each goes to the group that made its
  // element, so the outermost group keeps only the tuples (the 64-layer step's partitioned
  // program used to open as 60-item chunks of 1,153 such reads).
  void tupleReadsJoinTheirElementsGroup() {
    const char* text = R"(HloModule outputs, num_partitions=2

ENTRY main {
  x = f32[8,16] parameter(0), metadata={op_name="jit(f)/input"}
  a0 = f32[8,16] tanh(x), metadata={op_name="jit(f)/layer0/tanh"}
  a1 = f32[8,16] tanh(a0), metadata={op_name="jit(f)/layer0/tanh"}
  a = f32[8,16] tanh(a1), metadata={op_name="jit(f)/layer0/tanh"}
  b0 = f32[8,16] exponential(x), metadata={op_name="jit(f)/layer1/exp"}
  b1 = f32[8,16] exponential(b0), metadata={op_name="jit(f)/layer1/exp"}
  b = f32[8,16] exponential(b1), metadata={op_name="jit(f)/layer1/exp"}
  outputs = (f32[8,16], f32[8,16]) tuple(a, b)
  g0 = f32[8,16] get-tuple-element(outputs), index=0
  g1 = f32[8,16] get-tuple-element(outputs), index=1
  n1 = f32[8,16] negate(g1)
  ROOT r = (f32[8,16], f32[8,16]) tuple(g0, n1)
}
)";
    Session session;
    const DocumentModel& doc = *session.document();
    QVERIFY(session.loadHloText(text, "outputs.hlo").ok());
    const ScopeTree tree = ScopeTree::Build(*doc.module()->entry());
    QVERIFY(tree.fromMetadata());
    const int layer0 = tree.scopeOf(doc.findInstruction("a")->id());
    const int layer1 = tree.scopeOf(doc.findInstruction("b")->id());
    QVERIFY(layer0 > 0 && layer1 > 0 && layer0 != layer1);
    QCOMPARE(tree.scope(layer0).label, std::string("layer0"));
    QCOMPARE(tree.scopeOf(doc.findInstruction("g0")->id()), layer0);
    QCOMPARE(tree.scopeOf(doc.findInstruction("g1")->id()), layer1);
    // Not a get-tuple-element: stays where it is (the outermost group), as do the tuples.
    QCOMPARE(tree.scopeOf(doc.findInstruction("n1")->id()), 0);
    QCOMPARE(tree.scopeOf(doc.findInstruction("outputs")->id()), 0);
    QCOMPARE(tree.scopeOf(doc.findInstruction("r")->id()), 0);
  }

  void collapseExpandAndSearch() {
    Session session;
    DocumentModel& doc = *session.document();
    GraphView view;
    ShowDocument(view, session);
    QVERIFY(session.loadHloText(kScoped, "scoped.hlo").ok());
    QVERIFY(WaitForLayout(view));
    QCOMPARE(view.nodes().size(), 7);  // small graphs start fully expanded
    const int64_t t0 = doc.findInstruction("t0")->id();
    QVERIFY(view.nodeForInstruction(t0));
    const int layer0 = view.scopeTree()->scope(0).children[0];
    view.collapseScope(layer0);
    QVERIFY(WaitForLayout(view));
    QCOMPARE(view.nodes().size(), 5);  // x, layer0 group, w1, d1, t1
    QVERIFY(!view.nodeForInstruction(t0));
    GraphNodeItem* group = view.nodeForKey(GroupKey(layer0));
    QVERIFY(group && group->isGroup());
    QVERIFY(group->look().lines.join(" ").contains("3 instructions"));
    // Search finds hidden instructions; revealing expands their scope again.
    const QList<int64_t> hits = view.setSearch("tanh");
    QCOMPARE(hits.size(), 2);
    view.reveal(t0);
    QVERIFY(WaitForLayout(view));
    QVERIFY(view.nodeForInstruction(t0));
    QCOMPARE(view.nodes().size(), 7);
    QCOMPARE(view.setSearch("layer1").size(), 0);  // names and opcodes, not scopes
    QCOMPARE(view.setSearch("w").size(), 2);       // w0, w1
    QCOMPARE(view.setSearch("TaNh").size(), 2);    // case does not matter
    QCOMPARE(view.setSearch("d0dot").size(), 0);   // a name and its opcode are separate texts
    QCOMPARE(view.setSearch("d1").size(), 1);
    // Shardings are searched too (the index of their texts follows the annotations).
    QCOMPARE(view.setSearch("devices=[4,1]").size(), 0);
    const auto four = HloSharding::Parse("{devices=[4,1]0,1,2,3}");
    QVERIFY(four.ok());
    QVERIFY(doc.annotate(doc.findInstruction("x")->id(), *four));
    QVERIFY(view.setSearch("DEVICES=[4,1]").contains(doc.findInstruction("x")->id()));
    view.collapseAll();
    QVERIFY(WaitForLayout(view));
    QCOMPARE(view.nodes().size(), 3);
    view.expandAll();
    QVERIFY(WaitForLayout(view));
    QCOMPARE(view.nodes().size(), 7);
  }

  // Identical sibling groups are one run, folded at open into one node; edges into it are bundled
  // with their count; a group expanded, collapsed and expanded again is served from the cache; a
  // layout superseded before it is shown is cancelled; revealing an instruction opens exactly the
  // groups holding it.
  // "Expand all" asked for on a graph above GraphView::kExpandAllWarnAt instructions says how many
  // and offers one level instead; a small graph expands at once without asking.
  void expandAllOnALargeGraphAsksFirst() {
    Session session;
    QVERIFY(session.loadHloText(QString::fromStdString(Stack(1300)), "big.hlo").ok());
    GraphView view;
    ShowDocument(view, session);
    QVERIFY(WaitForLayout(view));
    std::vector<int64_t> asked;
    GraphView::ExpandAllChoice answer = GraphView::ExpandAllChoice::kCancel;
    view.requestExpandAllChoice = [&](int64_t n) {
      asked.push_back(n);
      return answer;
    };
    const std::set<int> before = view.viewState().expanded;
    view.requestExpandAll();
    QCOMPARE(asked, (std::vector<int64_t>{1 + 4 * 1300}));
    QCOMPARE(view.viewState().expanded, before);  // cancelled: nothing laid out
    answer = GraphView::ExpandAllChoice::kOneLevel;
    view.requestExpandAll();
    QVERIFY(WaitForLayout(view));
    const std::set<int> one = view.viewState().expanded;
    QVERIFY(one.size() > before.size());
    QVERIFY(one.size() < view.scopeTree()->allExpanded().size());  // the ffn groups stay closed
    for (int s : before) QVERIFY(one.count(s));

    Session small_session;
    QVERIFY(small_session.loadHloText(QString::fromStdString(Stack(5)), "small.hlo").ok());
    GraphView small;
    small.setJobTracker(small_session.jobs());
    small.setDocument(small_session.document());
    QVERIFY(WaitForLayout(small));
    small.requestExpandAllChoice = [&](int64_t n) {
      asked.push_back(n);
      return GraphView::ExpandAllChoice::kCancel;
    };
    small.requestExpandAll();
    QVERIFY(WaitForLayout(small));
    QCOMPARE(asked.size(), size_t{2});
    QCOMPARE(small.viewState().expanded, small.scopeTree()->allExpanded());
  }

  // Search at fit zoom: revealing the match zooms to a readable scale (100%) around it; at a
  // readable zoom the zoom stays.
  void revealZoomsToReadable() {
    Session session;
    DocumentModel& doc = *session.document();
    QVERIFY(session.loadHloText(QString::fromStdString(Stack(5)), "stack.hlo").ok());
    GraphView view;
    ShowDocument(view, session);
    QVERIFY(WaitForLayout(view));
    for (int i = 0; i < 12; ++i) view.zoomOut();
    QVERIFY(view.transform().m11() < GraphView::kReadableScale);
    const int64_t t3 = doc.findInstruction("t3")->id();
    view.reveal(t3);
    QVERIFY(WaitForLayout(view));
    QTRY_VERIFY(view.nodeForInstruction(t3));
    QCOMPARE(view.transform().m11(), 1.0);
    view.zoomIn();  // 125%: readable, kept
    const int64_t t1 = doc.findInstruction("t1")->id();
    view.reveal(t1);
    QVERIFY(WaitForLayout(view));
    QCOMPARE(view.transform().m11(), 1.25);
  }

  // Edges are drawn under the clip the view sets for Qt's fast one-pixel strokes (the device,
  // not the edge's bounds): at 100% every edge 40 pixels long or more is darker than both its
  // sides somewhere along it.
  void edgesDrawnWhole() {
    Session session;
    GraphView view;
    ShowDocument(view, session);
    view.setPalette(QPalette(Qt::white));  // light: an edge is darker than what it crosses
    QVERIFY(session.loadHloText(kScoped, "scoped.hlo").ok());
    QVERIFY(WaitForLayout(view));
    for (double scale : {1.0}) {
      view.resetTransform();
      view.scale(scale, scale);
      view.centerOn(view.scene()->sceneRect().center());
      const QImage image = view.viewport()->grab().toImage();
      int edges = 0;
      for (QGraphicsItem* item : view.scene()->items()) {
        auto* edge = dynamic_cast<GraphEdgeItem*>(item);
        if (!edge || edge->path().length() * scale < 40) continue;  // short ones lie mostly under their nodes
        ++edges;
        // Somewhere along it (a node may lie over part of it) the line is darker than both sides.
        bool seen = false;
        QString where;
        for (double f = 0.2; f < 0.85 && !seen; f += 0.1) {
          const QPointF mid = edge->path().pointAtPercent(f);
          const double angle = edge->path().angleAtPercent(f) * M_PI / 180;
          const QPointF normal = QPointF(std::sin(angle), std::cos(angle)) * (6 / scale);  // 6 px aside
          const QPoint at = view.mapFromScene(mid), left = view.mapFromScene(mid + normal),
                       right = view.mapFromScene(mid - normal);
          if (!image.rect().contains(left) || !image.rect().contains(right)) continue;
          const int line = qGray(image.pixel(at));
          seen = line < std::min(qGray(image.pixel(left)), qGray(image.pixel(right))) - 12;
          where += QString(" %1").arg(line);
        }
        if (!seen) {
          QFAIL(qPrintable(QString("edge %1 -> %2 not seen at %3%:%4")
                               .arg(QString::fromStdString(edge->tail()), QString::fromStdString(edge->head()))
                               .arg(scale * 100)
                               .arg(where)));
        }
      }
      QVERIFY(edges >= 1);
    }
  }

  // The graph toolbar never overlaps itself: in a narrow pane (the partitioned mode at 1024x700,
  // side by side) its buttons go below the search row; in a wide one they stay beside it.
  void toolbarStacksWhenNarrow() {
    GraphPane pane;
    pane.resize(1400, 400);
    pane.show();
    QVERIFY(QTest::qWaitForWindowExposed(&pane));
    QVERIFY(!pane.toolbarStacked());
    pane.resize(560, 400);
    QTRY_VERIFY(pane.toolbarStacked());
    QVERIFY(pane.searchField()->width() >= pane.searchField()->minimumWidth());
    pane.resize(1400, 400);
    QTRY_VERIFY(!pane.toolbarStacked());
  }

  void repeatedLayersFoldBundleAndCache() {
    Session session;
    DocumentModel& doc = *session.document();
    QVERIFY(session.loadHloText(QString::fromStdString(Stack(5, 2)), "stack.hlo").ok());
    const ScopeTree tree = ScopeTree::Build(*doc.module()->entry());
    QCOMPARE(tree.runs().size(), size_t{1});
    const RepeatRun& run = tree.runs()[0];
    QCOMPARE(run.parent, 0);
    QCOMPARE(run.members.size(), size_t{5});
    QCOMPARE(run.label, std::string("layer0 \u2026 layer4"));
    // A weight without metadata is drawn in the group of its first user.
    QCOMPARE(tree.scope(tree.scopeOf(doc.findInstruction("w3")->id())).path, std::string("layer3/ffn"));

    GraphView view;
    ShowDocument(view, session);
    QVERIFY(WaitForLayout(view));
    QVERIFY(WaitUntilIdle(session));  // propagation: the shardings runDifferences compares
    QCOMPARE(view.nodes().size(), 2);  // x and "layer0 … layer4 × 5"
    QVERIFY(view.nodeForKey(FoldKey(0)));
    const std::string x = InstructionKey(doc.findInstruction("x")->id());
    const HierarchyEdge* in = FindEdge(*view.currentLayout(), x, FoldKey(0));
    QVERIFY(in);
    QCOMPARE(in->count, 2);  // x feeds layer0's dot and its residual add
    const QStringList diffs = view.runDifferences(0);
    QVERIFY2(diffs.size() == 1 && diffs[0].startsWith("layer2: "), qPrintable(diffs.join("\n")));

    // Everything collapsed, then the run shown group by group: one edge per pair of layers.
    view.collapseAll();
    QVERIFY(WaitForLayout(view));
    QCOMPARE(view.nodes().size(), 2);
    view.unfoldRun(0);
    QVERIFY(WaitForLayout(view));
    QCOMPARE(view.nodes().size(), 6);
    const std::vector<int> layers = run.members;
    for (int l = 0; l + 1 < 5; ++l) {
      const HierarchyEdge* e = FindEdge(*view.currentLayout(), GroupKey(layers[l]), GroupKey(layers[l + 1]));
      QVERIFY(e);
      QCOMPARE(e->count, 2);
    }

    // Expanding a layer lays out that layer and the root again, nothing else.
    const int runs_before = LayoutCache::instance().layoutsRun();
    view.expandScope(layers[3]);
    QVERIFY(WaitForLayout(view));
    QCOMPARE(view.currentLayout()->groups, 2);
    QCOMPARE(LayoutCache::instance().layoutsRun() - runs_before, 2);
    const int ffn = tree.scope(layers[3]).children[0];
    QVERIFY(view.nodeForKey(GroupKey(ffn)));
    view.expandScope(ffn);
    QVERIFY(WaitForLayout(view));
    QCOMPARE(view.currentLayout()->groups, 3);  // root, layer3, layer3/ffn
    // The frames nest, the nodes sit in their own.
    GraphClusterItem* frame = view.clusterForScope(layers[3]);
    GraphClusterItem* inner = view.clusterForScope(ffn);
    QVERIFY(frame && inner);
    QVERIFY(Inside(inner->rect(), frame->rect()));
    GraphNodeItem* d3 = view.nodeForInstruction(doc.findInstruction("d3")->id());
    GraphNodeItem* a3 = view.nodeForInstruction(doc.findInstruction("a3")->id());
    QVERIFY(d3 && a3);
    QVERIFY(Inside(d3->rect(), inner->rect()));
    QVERIFY(Inside(a3->rect(), frame->rect()) && !Inside(a3->rect(), inner->rect()));
    // layer2 -> layer3's dot and its residual add: one edge each, through the frames.
    QVERIFY(FindEdge(*view.currentLayout(), GroupKey(layers[2]), d3->key()));
    QVERIFY(FindEdge(*view.currentLayout(), GroupKey(layers[2]), a3->key()));

    // Collapsed and expanded again: every group layout comes from the cache.
    const int runs_expanded = LayoutCache::instance().layoutsRun();
    view.collapseScope(layers[3]);
    QVERIFY(WaitForLayout(view));
    QVERIFY(!view.clusterForScope(layers[3]));
    view.expandScope(layers[3]);
    QVERIFY(WaitForLayout(view));
    QCOMPARE(LayoutCache::instance().layoutsRun(), runs_expanded);
    QCOMPARE(view.currentLayout()->groups, 2);
    QCOMPARE(view.currentLayout()->groups_cached, 2);

    // Two changes in a row: the first layout is cancelled, only the second is shown.
    const int applied = view.layoutsApplied(), cancelled = view.layoutsCancelled();
    view.expandScope(layers[1]);
    view.expandScope(layers[4]);
    QVERIFY(WaitForLayout(view));
    QCOMPARE(view.layoutsApplied(), applied + 1);
    QCOMPARE(view.layoutsCancelled(), cancelled + 1);
    QVERIFY(view.clusterForScope(layers[1]) && view.clusterForScope(layers[4]));

    // Reveal after collapsing everything: exactly layer0, its ffn and the run are opened.
    view.collapseAll();
    QVERIFY(WaitForLayout(view));
    QCOMPARE(view.nodes().size(), 2);
    const int64_t t0 = doc.findInstruction("t0")->id();
    view.reveal(t0);
    QVERIFY(WaitForLayout(view));
    QVERIFY(view.nodeForInstruction(t0));
    QCOMPARE(view.viewState().expanded, (std::set<int>{0, layers[0], tree.scope(layers[0]).children[0]}));
    QCOMPARE(view.viewState().unfolded, std::set<int>{0});
  }

  // Without metadata the groups are the called computations (a while loop's condition and body
  // around it) and chunks of the topological order, none showing more than kMaxItems items.
  void computationsAndChunks() {
    Session session;
    DocumentModel& doc = *session.document();
    QVERIFY(session.loadHloText(QString::fromStdString(Loop()), "loop.hlo").ok());
    const ScopeTree tree = ScopeTree::Build(*doc.module()->entry());
    QVERIFY(!tree.fromMetadata());
    QCOMPARE(tree.scope(0).total, int64_t{105 + 4 + 7});  // entry, condition, body
    const int64_t w = doc.findInstruction("w")->id();
    int loop = -1;
    for (size_t s = 0; s < tree.scopes().size(); ++s) {
      const ScopeNode& node = tree.scopes()[s];
      QVERIFY2(static_cast<int>(node.direct.size() + node.children.size()) <= ScopeTree::kMaxItems, node.path.c_str());
      if (node.kind == ScopeNode::Kind::kCall) loop = static_cast<int>(s);
    }
    QVERIFY(loop > 0);
    QCOMPARE(tree.scope(loop).caller, w);
    QCOMPARE(tree.scope(loop).label, std::string("w"));
    QCOMPARE(tree.scope(loop).children.size(), size_t{2});
    QCOMPARE(tree.scope(tree.scope(loop).children[0]).label, std::string("condition"));
    QCOMPARE(tree.scope(tree.scope(loop).children[1]).label, std::string("body"));
    // The body's tanh sits in the body; the loop state flows into the body's parameter.
    const Computation* body = doc.module()->FindComputation("body");
    QVERIFY(body);
    const int32_t v2 = tree.positionOf(body->root()->operand(1)->id());
    QVERIFY(v2 >= 0);
    QCOMPARE(tree.scopeAt(v2), tree.scope(loop).children[1]);
    const int32_t init = tree.positionOf(doc.findInstruction("init")->id());
    const int32_t param = tree.positionOf(body->parameters()[0]->id());
    QVERIFY(std::find(tree.edges().begin(), tree.edges().end(), std::make_pair(init, param)) != tree.edges().end());
    // The entry's 100 adds are split into chunks in order.
    int chunks = 0;
    for (int c : tree.scope(0).children) chunks += tree.scope(c).kind == ScopeNode::Kind::kChunk;
    QVERIFY(chunks >= 2);
    QCOMPARE(tree.scope(tree.scope(0).children[0]).label.substr(0, 7), std::string("a0 \u2026 "));

    // Laid out whole: every node inside the frames of every group holding it.
    GraphView view;
    ShowDocument(view, session);
    QVERIFY(WaitForLayout(view));
    view.expandAll();
    QVERIFY(WaitForLayout(view));
    QCOMPARE(view.nodes().size(), 116);
    for (GraphNodeItem* n : view.nodes()) {
      for (int s = tree.scopeOf(n->instructionId()); s > 0; s = tree.scope(s).parent) {
        GraphClusterItem* frame = view.clusterForScope(s);
        QVERIFY(frame);
        QVERIFY2(Inside(n->rect(), frame->rect()), (n->key() + " outside " + tree.scope(s).path).c_str());
      }
    }
  }

  // A training step from the zoo opens as forward / loss / backward / optimizer, the forward's
  // layers folded; a weight is drawn in its forward layer.
  // The search index: a small graph's is built on its first search; a large one's (5,000
  // instructions or more) in the background as soon as the tree or the shardings change, so the
  // first search finds it ready. Either finds names, opcodes and sharding texts.
  void searchIndexBuiltAhead() {
    {
      Session session;
      GraphView view;
      view.setJobTracker(session.jobs());
      view.setDocument(session.document());
      QVERIFY(session.loadHloText(kScoped, "scoped.hlo").ok());
      QVERIFY(WaitUntilIdle(session));
      QVERIFY(!view.searchIndexCurrent());  // small: built when searched
      QCOMPARE(view.setSearch("tanh").size(), 2);
      QVERIFY(view.searchIndexCurrent());
    }
    auto built = ZooBuild("transformer", {{"layers", "17"}});
    QVERIFY(built.ok());
    QVERIFY((*built)->instruction_count() >= static_cast<int64_t>(GraphView::kSearchIndexInBackgroundAt));
    Session session;
    DocumentModel& doc = *session.document();
    GraphView view;
    view.setJobTracker(session.jobs());
    view.setDocument(&doc);
    QVERIFY(session.loadHloText(QString::fromStdString(PrintHloModule(**built)), "step.hlo").ok());
    QVERIFY(WaitUntilIdle(session));
    QVERIFY(view.searchIndexCurrent());  // built on the layout lane after propagation, before any search
    const int64_t wi = doc.findInstruction("layer11_ffn_wi")->id();
    const QList<int64_t> hits = view.setSearch("LAYER11_FFN_WI");
    QVERIFY(hits.contains(wi));
    for (int64_t id : hits) QVERIFY(doc.instruction(id)->name().find("layer11_ffn_wi") != std::string::npos);
    // An annotation makes it out of date; it is built again in the background with the new sharding.
    // Its last dimension split over every device: "{devices=[1,...,1,N]<=[N]}".
    const std::string n = std::to_string(doc.mesh().num_devices());
    std::string dims;
    for (int64_t d = 0; d + 1 < doc.instruction(wi)->shape().rank(); ++d) dims += "1,";
    const auto columns = HloSharding::Parse("{devices=[" + dims + n + "]<=[" + n + "]}");
    QVERIFY(columns.ok());
    QVERIFY(doc.annotate(wi, *columns));
    QVERIFY(!view.searchIndexCurrent());
    QVERIFY(WaitUntilIdle(session));
    QVERIFY(view.searchIndexCurrent());
    QVERIFY(view.setSearch(QString::fromStdString("devices=[" + dims + n + "]")).contains(wi));
  }

  void trainingStepTree() {
    auto built = ZooBuild("transformer", {{"layers", "4"}});
    QVERIFY(built.ok());
    Session session;
    DocumentModel& doc = *session.document();
    QVERIFY(session.loadHloText(QString::fromStdString(PrintHloModule(**built)), "step.hlo").ok());
    const ScopeTree tree = ScopeTree::Build(*doc.module()->entry());
    QVERIFY(tree.fromMetadata());
    std::vector<std::string> top;
    for (int c : tree.scope(0).children) top.push_back(tree.scope(c).label);
    std::string labels;
    for (const auto& t : top) labels += t + " ";
    QVERIFY2(top == (std::vector<std::string>{"forward", "loss", "backward", "optimizer"}), labels.c_str());
    QCOMPARE(tree.scope(tree.scopeOf(doc.findInstruction("layer2_wi")->id())).path, std::string("forward/layer2/ffn"));
    int forward_runs = 0;
    for (const RepeatRun& r : tree.runs()) {
      if (tree.scope(r.parent).label == "forward") {
        ++forward_runs;
        QCOMPARE(r.members.size(), size_t{4});
      }
    }
    QCOMPARE(forward_runs, 1);
  }
};

QTEST_MAIN(TestGuiGraph)
#include "test_gui_graph.moc"
