#include "views/inspector_panel.h"

#include <QTextBrowser>
#include <QUrl>
#include <QVBoxLayout>

#include "core/base/units.h"
#include "core/ir/ir.h"
#include "views/analysis_model.h"
#include "views/document_model.h"
#include "views/sharding_style.h"

namespace shardscope::views {

using namespace ::shardscope::sim;

namespace {

QString Q(const std::string& s) { return QString::fromStdString(s); }
QString Esc(const QString& s) { return s.toHtmlEscaped(); }

QString Link(const Instruction* inst) {
  if (!inst) return QString();
  return QString("<a href=\"inst:%1\">%2</a>").arg(inst->id()).arg(Esc(Q(inst->name())));
}

}  // namespace

InspectorPanel::InspectorPanel(QWidget* parent) : QWidget(parent), browser_(new QTextBrowser(this)) {
  setObjectName("inspector");
  browser_->setOpenLinks(false);
  browser_->setOpenExternalLinks(false);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(browser_);
  connect(browser_, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    if (!doc_ || url.scheme() != "inst") return;
    bool ok = false;
    const qint64 id = url.path().toLongLong(&ok);
    if (ok) doc_->select(id);
  });
}

void InspectorPanel::setDocument(DocumentModel* doc) {
  if (doc_) doc_->disconnect(this);
  doc_ = doc;
  if (!doc_) return;
  connect(doc_, &DocumentModel::selectionChanged, this, &InspectorPanel::refresh);
  connect(doc_, &DocumentModel::shardingsUpdated, this, &InspectorPanel::refresh);
  connect(doc_, &DocumentModel::annotationsChanged, this, &InspectorPanel::refresh);
  connect(doc_, &DocumentModel::meshChanged, this, &InspectorPanel::refresh);
  connect(doc_, &DocumentModel::moduleReset, this, &InspectorPanel::refresh);
  refresh();
}

void InspectorPanel::setAnalysis(AnalysisModel* analysis) {
  if (analysis_) analysis_->disconnect(this);
  analysis_ = analysis;
  if (analysis_) connect(analysis_, &AnalysisModel::partitionUpdated, this, &InspectorPanel::refresh);
  refresh();
}

QString InspectorPanel::html() const { return browser_->toHtml(); }

void InspectorPanel::refresh() {
  if (!doc_) return;
  const Instruction* inst = doc_->instruction(doc_->selected());
  if (!inst) {
    QString h = "<p><i>Select a tensor in the graph (or the instruction table) to see its sharding and why it "
                "is sharded that way.</i></p>";
    if (doc_->module()) {
      h += QString("<p><b>%1</b>: %2 instructions, mesh <tt>%3</tt>, %4 annotations.</p>")
               .arg(Esc(Q(doc_->module()->name())))
               .arg(doc_->module()->instruction_count())
               .arg(Esc(Q(doc_->mesh().ToString())))
               .arg(doc_->annotations().size());
      if (!doc_->propagationSummary().isEmpty()) h += QString("<p><small>%1</small></p>").arg(Esc(doc_->propagationSummary()));
    }
    browser_->setHtml(h);
    return;
  }
  const DeviceMesh& mesh = doc_->mesh();
  const Shape& shape = inst->shape();
  const auto sh = doc_->sharding(inst->id());
  const TensorOrigin origin = doc_->origin(inst->id());
  QString h;
  h += QString("<h3 style='margin-bottom:2px'>%1</h3>").arg(Esc(Q(inst->name())));
  h += QString("<p style='margin-top:0'><tt>%1</tt> &nbsp;%2").arg(Esc(ShapeText(shape)), Esc(Q(inst->opcode_text())));
  if (inst->parent()) h += QString(" &nbsp;<small>in %1</small>").arg(Esc(Q(inst->parent()->name())));
  h += "</p>";
  if (sh) {
    const QColor fill = ShardingFillColor(*sh, palette());
    h += QString("<p><span style='background-color:%1; color:%2'>&nbsp;%3&nbsp;</span> &nbsp;<b>%4</b></p>")
             .arg(fill.name(), TextColorOn(fill).name(), Esc(NamedAxesText(*sh, shape, mesh, Q(inst->name()))),
                  origin == TensorOrigin::kUser ? "your annotation" : "inferred");
    h += QString("<p>HLO: <tt>%1</tt></p>").arg(Esc(HloShardingText(*sh)));
    h += QString("<p>Per device: <tt>%1</tt> &middot; <b>%2</b> of %3</p>")
             .arg(Esc(LocalShapeText(shape, sh)), Q(FormatBytes(static_cast<double>(BytesPerDevice(shape, sh)))),
                  Q(FormatBytes(static_cast<double>(shape.ByteSize()))));
  } else {
    h += "<p><i>No sharding yet.</i> Assign its dimensions to mesh axes in the Mesh panel.</p>";
  }
  // Why.
  h += "<h4>Why is it sharded like this?</h4>";
  const auto steps = doc_->why(inst->id());
  if (steps.empty()) {
    h += sh ? "<p><i>No provenance recorded.</i></p>" : "<p><i>Nothing reached it: no annotation propagates here.</i></p>";
  } else {
    h += "<ol style='margin-left:-20px'>";
    for (const ExplainStep& step : steps) {
      const Instruction* at = step.instruction;
      QString line = Link(at);
      if (step.sharding != "none" && !step.sharding.empty() && at) {
        auto parsed = HloSharding::Parse(step.sharding);
        line += " <tt>" + Esc(parsed.ok() ? NamedAxesText(*parsed, at->shape(), mesh, "") : Q(step.sharding)) + "</tt>";
      }
      const ShardingOrigin& o = step.origin;
      if (o.direction == prop::Direction::kAnnotation) {
        line += " &mdash; <b>your annotation</b>";
      } else {
        QString how = Esc(Q(std::string(prop::DirectionName(o.direction))));
        if (!o.rule.empty()) how += " through " + Esc(Q(std::string(o.rule)));
        line += " &larr; " + how;
        if (o.source) {
          line += " from " + Link(o.source);
          if (o.second_source) line += " and " + Link(o.second_source);
        }
        QStringList detail;
        if (o.aggressiveness >= 0) detail << QString("priority level %1").arg(o.aggressiveness);
        if (o.iteration >= 0) detail << QString("sweep %1").arg(o.iteration);
        if (!detail.isEmpty()) line += " <small>(" + detail.join(", ") + ")</small>";
        if (!o.source && !step.text.empty()) line += "<br><small>" + Esc(Q(step.text)) + "</small>";
      }
      h += "<li>" + line + "</li>";
    }
    h += "</ol>";
  }
  // Neighbours.
  if (!inst->operands().empty()) {
    QStringList ops;
    for (const Instruction* op : inst->operands()) ops << Link(op);
    h += "<p><b>Operands:</b> " + ops.join(", ") + "</p>";
  }
  if (!inst->users().empty()) {
    QStringList users;
    for (const Instruction* u : inst->users()) users << Link(u);
    h += "<p><b>Users:</b> " + users.join(", ") + "</p>";
  }
  // What the partitioner turned it into.
  if (analysis_ && analysis_->partition().ok()) {
    const PartitionResult& part = *analysis_->partition().result;
    auto it = part.origin_map.find(doc_->qualifiedName(inst).toStdString());
    if (it != part.origin_map.end() && !it->second.empty()) {
      QStringList became;
      for (const auto& n : it->second) became << "<tt>" + Esc(Q(n)) + "</tt>";
      h += "<p><b>Partitioned into:</b> " + became.join(", ") + "</p>";
    }
    QStringList colls;
    for (const auto& c : part.collectives) {
      if (c.origin == inst->name()) {
        colls << QString("%1 (%2, %3/device): %4")
                     .arg(Esc(Q(std::string(OpcodeName(c.kind)))), Esc(Q(c.replica_groups)),
                          Q(FormatBytes(static_cast<double>(c.bytes_per_device))), Esc(Q(c.reason)));
      }
    }
    if (!colls.isEmpty()) h += "<p><b>Collectives it needs:</b><br>" + colls.join("<br>") + "</p>";
  }
  const std::string op_name = inst->op_name();
  if (!op_name.empty()) h += QString("<p><small>op_name: %1</small></p>").arg(Esc(Q(op_name)));
  browser_->setHtml(h);
}

}  // namespace shardscope::views
