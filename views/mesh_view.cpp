#include "core/base/units.h"
#include "views/mesh_view.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <QDrag>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHelpEvent>
#include <QLabel>
#include <QLineEdit>
#include <QMimeData>
#include <QMouseEvent>
#include <QPainter>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollArea>
#include <QScrollBar>
#include <QSpinBox>
#include <QTimer>
#include <QToolButton>
#include <QToolTip>
#include <QVBoxLayout>

#include "core/ir/ir.h"
#include "partitioner/spmd/conv_halo_slabs.h"
#include "views/analysis_model.h"
#include "views/document_model.h"
#include "views/halo_slabs_view.h"
#include "views/narrow_layout.h"
#include "views/sharding_style.h"

namespace shardscope::views {


namespace {

constexpr const char* kAxisMime = "application/x-shardscope-mesh-axis";

QString Q(const std::string& s) { return QString::fromStdString(s); }

// "Pipeline: 4 stages along L (GPipe) — S0 layers 0-1 · S1 layers 2-3 ..." for the grid's caption.
// The pass's decision that shards the update of `inst` (a weight it names, or one of that weight's
// optimizer auxiliaries: an entry parameter "<weight>_..." of the same shape), or null.
const shardscope::WeightUpdateDecision* UpdateDecisionFor(const shardscope::views::PartitionedProgram& p,
                                                          const shardscope::Module& module, const shardscope::Instruction& inst) {
  if (!p.ok() || !p.weight_update_sharding) return nullptr;
  for (const shardscope::WeightUpdateDecision& d : p.weight_update_decisions) {
    if (!d.sharded || d.shard_of_device.empty() || d.weight.empty()) continue;
    if (inst.name() == d.weight) return &d;
    const shardscope::Instruction* w = module.FindInstruction(d.weight);
    if (w && inst.opcode() == shardscope::Opcode::kParameter && inst.name().rfind(d.weight + "_", 0) == 0 &&
        inst.shape().dims == w->shape().dims)
      return &d;
  }
  return nullptr;
}

QString DimsText(const std::vector<int64_t>& dims) {
  QStringList out;
  for (int64_t d : dims) out << QString::number(d);
  return "[" + out.join(",") + "]";
}

QString StagesNote(const std::optional<shardscope::views::PipelineStageLayout>& stages) {
  if (!stages) return {};
  QStringList parts;
  for (int64_t s = 0; s < stages->stages && s < 8; ++s) parts << QString("S%1 %2").arg(s).arg(Q(stages->LayersText(s)));
  if (stages->stages > 8) parts << "...";
  return QString("<br><b>Pipeline:</b> %1 stages along %2 (%3): %4")
      .arg(stages->stages)
      .arg(Q(stages->axis_name), stages->circular ? "circular" : "GPipe", parts.join(" \u00B7 "));
}

QString DimLetter(int64_t d) {
  static const char* kLetters = "IJKLMNOPQRSTUVWABCDEFGH";
  return d < 23 ? QString(QChar(kLetters[d])) : QString("D%1").arg(d);
}

void ClearLayout(QLayout* layout) {
  while (QLayoutItem* item = layout->takeAt(0)) {
    if (QWidget* w = item->widget()) {
      w->hide();
      w->deleteLater();  // may be the sender of the signal being handled
    }
    if (QLayout* l = item->layout()) {
      ClearLayout(l);
      l->deleteLater();
    }
    delete item;
  }
}

// A mesh axis that can be dragged onto a tensor dimension.
class AxisChip : public QLabel {
 public:
  AxisChip(int axis, const MeshAxis& a, QWidget* parent) : QLabel(parent), axis_(axis) {
    setText(QString(" %1 \u00B7 %2 ").arg(Q(a.name)).arg(a.size));
    setFrameShape(QFrame::StyledPanel);
    setAutoFillBackground(true);
    setBackgroundRole(QPalette::Button);
    setCursor(Qt::OpenHandCursor);
    setToolTip(QString("Mesh axis %1 (%2 devices): drag it onto a tensor dimension").arg(Q(a.name)).arg(a.size));
  }

 protected:
  void mousePressEvent(QMouseEvent* e) override { press_ = e->position().toPoint(); }
  void mouseMoveEvent(QMouseEvent* e) override {
    if (!(e->buttons() & Qt::LeftButton)) return;
    if ((e->position().toPoint() - press_).manhattanLength() < 4) return;
    auto* drag = new QDrag(this);
    drag->setMimeData(MeshView::axisMimeData(axis_));
    drag->setPixmap(grab());
    drag->exec(Qt::MoveAction);
  }

 private:
  int axis_;
  QPoint press_;
};

// A row that accepts dropped axes.
class DropRow : public QWidget {
 public:
  DropRow(std::function<void(int)> on_drop, QWidget* parent) : QWidget(parent), on_drop_(std::move(on_drop)) {
    setAcceptDrops(true);
  }

 protected:
  void dragEnterEvent(QDragEnterEvent* e) override {
    if (e->mimeData()->hasFormat(kAxisMime)) {
      e->acceptProposedAction();
      setBackgroundRole(QPalette::Highlight);
      setAutoFillBackground(true);
    }
  }
  void dragLeaveEvent(QDragLeaveEvent*) override { setAutoFillBackground(false); }
  void dropEvent(QDropEvent* e) override {
    setAutoFillBackground(false);
    bool ok = false;
    const int axis = e->mimeData()->data(kAxisMime).toInt(&ok);
    if (!ok) return;
    e->acceptProposedAction();
    on_drop_(axis);
  }

 private:
  std::function<void(int)> on_drop_;
};

}  // namespace

// ---- DeviceGridWidget ----------------------------------------------------------------------------

DeviceGridWidget::DeviceGridWidget(QWidget* parent) : QWidget(parent) {
  setObjectName("deviceGrid");
  QSizePolicy sp(QSizePolicy::Expanding, QSizePolicy::Preferred);
  sp.setHeightForWidth(true);
  setSizePolicy(sp);
  setMouseTracking(true);
}

void DeviceGridWidget::setState(const DeviceMesh& mesh, const std::optional<HloSharding>& sharding,
                                const std::vector<int64_t>& dims, int64_t element_bytes) {
  mesh_ = mesh;
  sharding_ = sharding;
  tiles_.clear();
  const int64_t n = std::max<int64_t>(1, mesh.num_devices());
  std::map<std::vector<int64_t>, int> shard_ids;
  int64_t full_elems = 1;
  for (int64_t d : dims) full_elems *= d;
  for (int64_t i = 0; i < n; ++i) {
    DeviceTile t;
    // Mesh coordinates of position i (row-major over the axes).
    std::vector<int64_t> coords(static_cast<size_t>(mesh.num_axes()), 0);
    int64_t rest = i;
    for (int64_t a = mesh.num_axes() - 1; a >= 0; --a) {
      coords[static_cast<size_t>(a)] = rest % mesh.axis_size(a);
      rest /= mesh.axis_size(a);
    }
    t.coords = coords;
    t.device = mesh.num_axes() ? mesh.DeviceAt(coords) : i;
    if (!sharding) {
      t.shard = -1;
    } else if (sharding->IsMaximal()) {
      t.shard = t.device == sharding->maximal_device() ? 0 : -1;
      t.ranges = t.shard == 0 ? "everything" : "nothing";
      t.bytes = t.shard == 0 ? full_elems * element_bytes : 0;
    } else if (sharding->IsTileMaximal()) {  // replicated, manual, unknown
      t.shard = 0;
      t.ranges = sharding->IsReplicated() ? "everything" : (sharding->IsManual() ? "manual" : "unknown");
      t.bytes = full_elems * element_bytes;
    } else {
      t.tile_index = sharding->TileIndexForDevice(t.device);
      if (t.tile_index.empty()) {
        t.shard = -1;
      } else {
        auto [it, inserted] = shard_ids.emplace(t.tile_index, 0);
        (void)inserted;
        t.shard = 0;  // assigned below, in tile order
        const auto offset = sharding->ShardOffset(dims, t.device);
        const auto extent = sharding->ShardValidExtent(dims, t.device);
        QStringList parts;
        for (size_t d = 0; d < dims.size() && d < offset.size() && d < extent.size(); ++d) {
          parts << QString("%1:%2").arg(offset[d]).arg(offset[d] + extent[d]);
        }
        t.ranges = parts.join(", ");
        int64_t elems = 1;
        for (int64_t s : sharding->ShardShape(dims)) elems *= s;
        t.bytes = elems * element_bytes;
      }
    }
    tiles_.push_back(std::move(t));
  }
  // Distinct shards numbered in tile-index order (stable colours for the same sharding).
  int next = 0;
  for (auto& [index, id] : shard_ids) id = next++;
  for (auto& t : tiles_) {
    if (!t.tile_index.empty()) t.shard = shard_ids[t.tile_index];
  }
  distinct_ = sharding ? std::max(1, static_cast<int>(shard_ids.size())) : 0;
  if (sharding && sharding->IsMaximal()) distinct_ = 1;
  updateGeometry();
  update();
}

MeshGrid DeviceGridWidget::geometryFor(int width) const {
  const double avail = std::max(100, width - 36);
  MeshGrid g = MeshGrid::Shape(mesh_, 16);
  // A 1-D mesh wraps after fewer devices when 16 in a row would be narrower than 18 px each.
  if (mesh_.num_axes() <= 1) {
    const int fit = std::max(1, static_cast<int>(avail / (18 + g.gap)));
    if (fit < g.cols) g = MeshGrid::Shape(mesh_, fit);
  }
  auto tile_for = [&](int slice_cols) {
    return (avail - (slice_cols - 1) * g.slice_gap) / (slice_cols * g.cols) - g.gap;
  };
  g.slice_cols = 1;
  for (int sc = g.slices; sc >= 1; --sc) {
    if (tile_for(sc) >= 46) {
      g.slice_cols = sc;
      break;
    }
  }
  // Tiles shrink below 18 px rather than run past the widget's right edge (a wide 2-D mesh in a
  // narrow dock; the device numbers are then in the tooltips).
  g.tile = std::clamp(tile_for(g.slice_cols), 4.0, 86.0);
  if (g.slices == 1) g.label_h = 0;
  return g;
}

int DeviceGridWidget::heightForWidth(int width) const { return static_cast<int>(24 + geometryFor(width).Height()); }

QSize DeviceGridWidget::sizeHint() const { return QSize(360, heightForWidth(360)); }
QSize DeviceGridWidget::minimumSizeHint() const { return QSize(160, heightForWidth(std::max(160, width()))); }

int DeviceGridWidget::tileAt(const QPointF& p) const { return geometryFor(width()).TileAt(p, tiles_.size()); }

QRectF DeviceGridWidget::tileRect(int index) const { return geometryFor(width()).TileRect(static_cast<size_t>(index)); }

void DeviceGridWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QPalette pal = palette();
  const MeshGrid g = geometryFor(width());
  QFont small = font();
  small.setPointSizeF(std::max(6.5, font().pointSizeF() * 0.8));
  QFont bold = font();
  bold.setBold(true);
  g.PaintCaptions(p, mesh_, width(), small, bold, pal.color(QPalette::WindowText));
  for (size_t i = 0; i < tiles_.size(); ++i) {
    const DeviceTile& t = tiles_[i];
    const QRectF r = g.TileRect(i);
    QColor fill = t.shard >= 0 ? ShardTileColor(t.shard, distinct_, pal) : pal.color(QPalette::Base);
    if (!sharding_) fill = pal.color(QPalette::Button);
    p.setPen(QPen(pal.color(QPalette::Mid), 1));
    p.setBrush(fill);
    const double radius = std::min(4.0, g.tile / 5);  // small tiles stay squares
    p.drawRoundedRect(r, radius, radius);
    if (t.device == selected_device_ && selected_device_ >= 0) {
      p.setPen(QPen(pal.color(QPalette::Highlight), 3));
      p.setBrush(Qt::NoBrush);
      p.drawRoundedRect(r.adjusted(1.5, 1.5, -1.5, -1.5), radius, radius);
    }
    const QColor text = TextColorOn(fill);
    p.setPen(text);
    p.setFont(small);
    if (g.tile >= 14) p.drawText(r.adjusted(3, 1, -2, 0), Qt::AlignLeft | Qt::AlignTop, QString::number(t.device));
    if (g.tile >= 40 && sharding_) {
      QString center;
      if (!t.tile_index.empty()) {
        QStringList idx;
        for (int64_t v : t.tile_index) idx << QString::number(v);
        center = "[" + idx.join(",") + "]";
      } else {
        center = t.shard >= 0 ? (sharding_->IsMaximal() ? "all" : QString::fromUtf8("\u2261")) : QString("\u2013");
      }
      p.setFont(bold);
      p.drawText(r, Qt::AlignCenter, QFontMetricsF(bold).elidedText(center, Qt::ElideRight, r.width() - 4));
    }
    if (stages_ && t.device >= 0 && static_cast<size_t>(t.device) < stages_->stage_of_device.size()) {
      // The stage band: "S1" (and its layers when the tile is wide enough) on the stage's hue.
      const int64_t stage = stages_->stage_of_device[static_cast<size_t>(t.device)];
      const double band_h = std::min(14.0, r.height() * 0.3);
      const QRectF band(r.left() + 1, r.bottom() - band_h - 1, r.width() - 2, band_h);
      QColor hue = QColor::fromHsvF(std::fmod(0.08 + 0.61803 * static_cast<double>(stage), 1.0), 0.45, 0.92);
      p.setPen(Qt::NoPen);
      p.setBrush(hue);
      p.drawRoundedRect(band, 3, 3);
      p.setPen(TextColorOn(hue));
      p.setFont(small);
      QString label = QString("S%1").arg(stage);
      if (g.tile >= 56) label += " " + Q(stages_->LayersText(stage)).replace("layers ", "L").replace("layer ", "L");
      p.drawText(band, Qt::AlignCenter, QFontMetricsF(small).elidedText(label, Qt::ElideRight, band.width() - 2));
    }
    if (update_shards_ && !stages_ && t.device >= 0 && static_cast<size_t>(t.device) < update_shards_->shard_of_device.size()) {
      // The update band: "upd 3/8", the shard of the weight's update this device keeps.
      const int64_t k = update_shards_->shard_of_device[static_cast<size_t>(t.device)];
      const double band_h = std::min(14.0, r.height() * 0.3);
      const QRectF band(r.left() + 1, r.bottom() - band_h - 1, r.width() - 2, band_h);
      const QColor hue = QColor::fromHsvF(std::fmod(0.55 + 0.61803 * static_cast<double>(k), 1.0), 0.35, 0.95);
      p.setPen(Qt::NoPen);
      p.setBrush(hue);
      p.drawRoundedRect(band, 3, 3);
      p.setPen(TextColorOn(hue));
      p.setFont(small);
      const QString label = QString(g.tile >= 56 ? "upd %1/%2" : "%1/%2").arg(k).arg(update_shards_->shards);
      p.drawText(band, Qt::AlignCenter, QFontMetricsF(small).elidedText(label, Qt::ElideRight, band.width() - 2));
    }
  }
}

void DeviceGridWidget::setSelectedDevice(int64_t device) {
  if (device == selected_device_) return;
  selected_device_ = device;
  update();
}

void DeviceGridWidget::mouseReleaseEvent(QMouseEvent* e) {
  const int i = tileAt(e->position());
  if (e->button() == Qt::LeftButton && i >= 0) emit deviceClicked(tiles_[static_cast<size_t>(i)].device);
  QWidget::mouseReleaseEvent(e);
}

void DeviceGridWidget::setPipelineStages(std::optional<PipelineStageLayout> stages) {
  stages_ = std::move(stages);
  update();
}

void DeviceGridWidget::setUpdateShards(std::optional<UpdateShards> shards) {
  update_shards_ = std::move(shards);
  update();
}

bool DeviceGridWidget::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* he = static_cast<QHelpEvent*>(e);
    const int i = tileAt(he->pos());
    if (i < 0) {
      QToolTip::hideText();
      e->ignore();
      return true;
    }
    const DeviceTile& t = tiles_[static_cast<size_t>(i)];
    QStringList coords;
    for (int64_t a = 0; a < mesh_.num_axes(); ++a) {
      coords << QString("%1=%2").arg(Q(mesh_.axes()[static_cast<size_t>(a)].name)).arg(t.coords[static_cast<size_t>(a)]);
    }
    QString tip = QString("<b>device %1</b> (%2)").arg(t.device).arg(coords.join(", "));
    if (sharding_) {
      if (t.shard < 0) tip += "<br>holds nothing of this tensor";
      else tip += QString("<br>shard %1 of %2: [%3]<br>%4").arg(t.shard + 1).arg(distinct_).arg(t.ranges).arg(Q(FormatBytes(t.bytes)));
    }
    if (stages_ && static_cast<size_t>(t.device) < stages_->stage_of_device.size()) {
      const int64_t stage = stages_->stage_of_device[static_cast<size_t>(t.device)];
      tip += QString("<br>pipeline stage %1 of %2 (%3 = %1, %4 schedule): %5")
                 .arg(stage)
                 .arg(stages_->stages)
                 .arg(Q(stages_->axis_name), stages_->circular ? "circular" : "GPipe", Q(stages_->LayersText(stage)));
    }
    if (update_shards_ && static_cast<size_t>(t.device) < update_shards_->shard_of_device.size()) {
      tip += QString("<br>weight-update sharding: keeps and updates shard %1 of %2 of the weight and its optimizer state")
                 .arg(update_shards_->shard_of_device[static_cast<size_t>(t.device)])
                 .arg(update_shards_->shards);
    }
    QToolTip::showText(he->globalPos(), tip, this);
    return true;
  }
  return QWidget::event(e);
}

// ---- MeshView -------------------------------------------------------------------------------------

MeshView::MeshView(QWidget* parent) : QWidget(parent) {
  setObjectName("meshView");
  auto* content = new QWidget;
  auto* col = new QVBoxLayout(content);
  col->setContentsMargins(6, 6, 6, 6);

  // Mesh axes.
  auto* mesh_box = new QGroupBox("Device mesh");
  auto* mesh_col = new QVBoxLayout(mesh_box);
  mesh_summary_ = new QLabel;
  mesh_summary_->setObjectName("meshSummary");
  mesh_summary_->setWordWrap(true);
  mesh_col->addWidget(mesh_summary_);
  axes_box_ = new QWidget;
  axes_grid_ = new QGridLayout(axes_box_);
  axes_grid_->setContentsMargins(0, 0, 0, 0);
  mesh_col->addWidget(axes_box_);
  auto* add = add_axis_ = new QPushButton("Add axis");
  add->setToolTip("Add a mesh axis of size 1 (then resize it)");
  connect(add, &QPushButton::clicked, this, [this] { addAxis(); });
  auto* add_row = new QHBoxLayout;
  add_row->addWidget(add);
  add_row->addStretch();
  mesh_col->addLayout(add_row);
  col->addWidget(mesh_box);

  // The selected tensor.
  auto* tensor_box = new QGroupBox("Selected tensor");
  auto* tcol = new QVBoxLayout(tensor_box);
  tensor_title_ = new NameWrapLabel;  // long names break at their underscores when the dock is narrow
  tensor_title_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  tcol->addWidget(tensor_title_);
  tensor_state_ = new NameWrapLabel;
  tcol->addWidget(tensor_state_);
  // The rows below wrap rather than widen the dock: the chips onto a further line, the labels
  // onto two, long tensor names at their underscores.
  chips_row_ = new QWidget;
  new FlowLayout(chips_row_);
  chips_row_->layout()->setContentsMargins(0, 0, 0, 0);
  tcol->addWidget(chips_row_);
  dims_box_ = new QWidget;
  dims_layout_ = new QVBoxLayout(dims_box_);
  dims_layout_->setContentsMargins(0, 0, 0, 0);
  dims_layout_->setSpacing(2);
  tcol->addWidget(dims_box_);
  auto* named_row = new QHBoxLayout;
  named_ = new QLineEdit;
  named_->setObjectName("namedAxes");
  named_->setPlaceholderText("[I_X, J_Y]");
  named_->setToolTip("Named-axis notation: one entry per tensor dimension, I_X = split along mesh axis X, "
                     "I_XY = along X then Y, I = not split");
  apply_named_ = new QPushButton("Apply");
  named_row->addWidget(named_, 1);
  named_row->addWidget(apply_named_);
  tcol->addLayout(named_row);
  // What is wrong with a typed sharding, under the field (which is marked until it is edited).
  named_error_ = new QLabel;
  named_error_->setObjectName("namedAxesError");
  named_error_->setWordWrap(true);
  named_error_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  named_error_->hide();
  tcol->addWidget(named_error_);
  connect(named_, &QLineEdit::textEdited, this, [this] { markNamedAxes(QString()); });
  auto* buttons = new FlowLayout;
  replicate_ = new QPushButton("Replicate");
  replicate_->setObjectName("replicateButton");
  replicate_->setToolTip("Annotate the tensor as replicated on every device");
  clear_ = new QPushButton("Clear annotation");
  clear_->setToolTip("Remove your annotation: propagation decides this tensor's sharding");
  buttons->addWidget(replicate_);
  buttons->addWidget(clear_);
  tcol->addLayout(buttons);
  col->addWidget(tensor_box);
  connect(apply_named_, &QPushButton::clicked, this, [this] { applyNamedAxes(named_->text()); });
  connect(named_, &QLineEdit::returnPressed, this, [this] { applyNamedAxes(named_->text()); });
  connect(replicate_, &QPushButton::clicked, this, [this] { replicateSelected(); });
  connect(clear_, &QPushButton::clicked, this, [this] { clearSelectedAnnotation(); });

  // Devices.
  auto* grid_box = new QGroupBox("Devices");
  auto* gcol = new QVBoxLayout(grid_box);
  grid_ = new DeviceGridWidget;
  gcol->addWidget(grid_);
  grid_info_ = new QLabel;
  grid_info_->setWordWrap(true);
  gcol->addWidget(grid_info_);
  col->addWidget(grid_box);

  // The halo of a spatially sharded convolution, as the selected device receives it.
  auto* halo_box = new QGroupBox("Halo exchange (selected device)");
  halo_box->setObjectName("haloBox");
  auto* hcol = new QVBoxLayout(halo_box);
  halo_info_ = new NameWrapLabel;
  halo_info_->setObjectName("haloInfo");
  hcol->addWidget(halo_info_);
  halo_ = new HaloSlabsWidget;
  hcol->addWidget(halo_);
  halo_box_ = halo_box;
  halo_box_->hide();
  halo_box_->installEventFilter(this);
  col->addWidget(halo_box);
  connect(grid_, &DeviceGridWidget::deviceClicked, this, [this](qint64 d) { setHaloDevice(d); });
  col->addStretch();

  auto* scroll = new QScrollArea;
  scroll_ = scroll;
  scroll->setWidget(content);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  outer->addWidget(scroll);
}

void MeshView::setAnalysis(AnalysisModel* analysis) {
  if (analysis_) analysis_->disconnect(this);
  analysis_ = analysis;
  if (!analysis_) return;
  connect(analysis_, &AnalysisModel::partitionUpdated, this, [this] { rebuildTensor(); });
  connect(analysis_, &AnalysisModel::analysisReset, this, [this] { rebuildTensor(); });
  rebuildTensor();
}

void MeshView::setDocument(DocumentModel* doc) {
  if (doc_) doc_->disconnect(this);
  doc_ = doc;
  if (!doc_) return;
  connect(doc_, &DocumentModel::meshChanged, this, [this] {
    rebuildAxes();
    rebuildTensor();
  });
  connect(doc_, &DocumentModel::moduleReset, this, [this] {
    rebuildAxes();
    rebuildTensor();
  });
  connect(doc_, &DocumentModel::selectionChanged, this, [this](qint64) {
    markNamedAxes(QString());  // the message was about another tensor
    rebuildTensor();
  });
  connect(doc_, &DocumentModel::annotationsChanged, this, [this] { rebuildTensor(); });
  connect(doc_, &DocumentModel::shardingsUpdated, this, [this] { rebuildTensor(); });
  connect(doc_, &DocumentModel::weightUpdateShardingChanged, this, [this] { rebuildTensor(); });
  rebuildAxes();
  rebuildTensor();
}

const Instruction* MeshView::selectedTensor() const {
  if (!doc_) return nullptr;
  return doc_->instruction(doc_->selected());
}

void MeshView::rebuildAxes() {
  if (!doc_) return;
  const DeviceMesh& mesh = doc_->mesh();
  axes_box_->setEnabled(doc_->hasModule());
  add_axis_->setEnabled(doc_->hasModule());
  if (!doc_->hasModule()) {
    mesh_summary_->setText("<i>No module open.</i>");
  } else {
    mesh_summary_->setText(QString("<b>%1</b> &mdash; %2 device%3")
                               .arg(Q(mesh.ToString()).toHtmlEscaped())
                               .arg(mesh.num_devices())
                               .arg(mesh.num_devices() == 1 ? "" : "s"));
  }
  const int rows = static_cast<int>(mesh.num_axes());
  // Same number of axes: update the editors in place (one of them may be emitting right now).
  if (axes_grid_->rowCount() - 1 == rows && axes_grid_->count() == rows * 3 + 2) {
    for (int a = 0; a < rows; ++a) {
      auto* name = qobject_cast<QLineEdit*>(axes_grid_->itemAtPosition(a + 1, 0)->widget());
      auto* size = qobject_cast<QSpinBox*>(axes_grid_->itemAtPosition(a + 1, 1)->widget());
      if (!name || !size) break;
      QSignalBlocker b1(name), b2(size);
      if (!name->hasFocus()) name->setText(Q(mesh.axes()[static_cast<size_t>(a)].name));
      size->setValue(static_cast<int>(mesh.axis_size(a)));
    }
    return;
  }
  ClearLayout(axes_grid_);
  axes_grid_->addWidget(new QLabel("<small>axis</small>"), 0, 0);
  axes_grid_->addWidget(new QLabel("<small>size</small>"), 0, 1);
  for (int a = 0; a < rows; ++a) {
    auto* name = new QLineEdit(Q(mesh.axes()[static_cast<size_t>(a)].name));
    name->setObjectName(QString("axisName%1").arg(a));
    name->setMaximumWidth(90);
    name->setValidator(new QRegularExpressionValidator(QRegularExpression("[A-Za-z_][A-Za-z0-9_]*"), name));
    auto* size = new QSpinBox;
    size->setObjectName(QString("axisSize%1").arg(a));
    size->setRange(1, 4096);
    size->setKeyboardTracking(false);
    size->setValue(static_cast<int>(mesh.axis_size(a)));
    auto* remove = new QToolButton;
    remove->setText(QString::fromUtf8("\u2715"));
    remove->setToolTip("Remove this axis");
    remove->setEnabled(rows > 1);
    axes_grid_->addWidget(name, a + 1, 0);
    axes_grid_->addWidget(size, a + 1, 1);
    axes_grid_->addWidget(remove, a + 1, 2);
    connect(name, &QLineEdit::editingFinished, this, [this, a, name] { setAxisName(a, name->text()); });
    connect(size, &QSpinBox::valueChanged, this, [this, a](int v) { setAxisSize(a, v); });
    connect(remove, &QToolButton::clicked, this, [this, a] { removeAxis(a); });
  }
  axes_grid_->setColumnStretch(3, 1);
  auto* spacer = new QWidget;
  axes_grid_->addWidget(spacer, rows + 1, 3);
}

std::vector<std::vector<int64_t>> MeshView::currentAssignment() const {
  const Instruction* inst = selectedTensor();
  if (!inst || !inst->shape().IsArray()) return {};
  const int64_t rank = inst->shape().rank();
  std::vector<std::vector<int64_t>> dims(static_cast<size_t>(rank));
  auto s = doc_->sharding(inst->id());
  if (!s) return dims;
  auto axes = AxesOf(*s, rank, doc_->mesh());
  if (!axes.ok()) return dims;
  axes->dim_axes.resize(static_cast<size_t>(rank));
  return axes->dim_axes;
}

void MeshView::rebuildTensor() {
  if (!doc_) return;
  refreshHalo();
  // Pipelining as sharding: the stage axis of a pipelined module, derived with the document's
  // shardings (which may be the user's edits).
  grid_->setPipelineStages(doc_->module() ? DerivePipelineStages(*doc_->module(), doc_->mesh(),
                                                                 [this](const Instruction& i) { return doc_->sharding(i.id()); })
                                          : std::nullopt);
  ClearLayout(chips_row_->layout());
  ClearLayout(dims_layout_);
  const Instruction* inst = selectedTensor();
  const DeviceMesh& mesh = doc_->mesh();
  const bool array = inst && inst->shape().IsArray();
  named_->setEnabled(array);
  apply_named_->setEnabled(array);
  replicate_->setEnabled(array);
  clear_->setEnabled(inst && doc_->origin(inst->id()) == TensorOrigin::kUser);
  if (!doc_->hasModule()) {
    tensor_title_->setBreakableText("<i>Open a module (File \u25B8 Open) to annotate its tensors.</i>");
    tensor_state_->clearText();
    named_->clear();
    grid_->setState(DeviceMesh(), std::nullopt, {}, 0);
    grid_info_->clear();
    return;
  }
  if (!inst) {
    tensor_title_->setBreakableText("<i>Select a tensor in the graph to shard it.</i>");
    tensor_state_->clearText();
    named_->clear();
    grid_->setState(mesh, std::nullopt, {}, 0);
    grid_info_->setText((mesh.num_devices() == 1 ? QString("1 device.") : QString("%1 devices.").arg(mesh.num_devices())) +
                        " Select a tensor to see which shard each device holds." +
                        StagesNote(grid_->pipelineStages()));
    return;
  }
  const Shape& shape = inst->shape();
  tensor_title_->setBreakableText(QString("<b>%1</b> = %2 &nbsp; <tt>%3</tt>")
                             .arg(Q(inst->name()).toHtmlEscaped(), Q(inst->opcode_text()), ShapeText(shape).toHtmlEscaped()));
  const auto sh = doc_->sharding(inst->id());
  const TensorOrigin origin = doc_->origin(inst->id());
  if (!array) {
    tensor_state_->setBreakableText("This value is a tuple (or token): annotate its elements instead (get-tuple-element).");
    named_->clear();
    grid_->setState(mesh, std::nullopt, {}, 0);
    grid_info_->clear();
    return;
  }
  QString state;
  if (!sh) state = "No sharding yet: assign its dimensions to mesh axes below.";
  else {
    state = QString("<b>%1</b> &mdash; %2")
                .arg(NamedAxesText(*sh, shape, mesh, Q(inst->name())).toHtmlEscaped(),
                     origin == TensorOrigin::kUser ? "your annotation" : "inferred by propagation");
  }
  tensor_state_->setBreakableText(state);
  if (!named_->hasFocus()) {
    named_->setText(sh ? NamedAxesText(*sh, shape, mesh, "") : QString());
  }

  // Axis chips to drag.
  QLayout* chips = chips_row_->layout();
  chips->addWidget(new WrapLabel("<small>Drag an axis onto a dimension, or click:</small>"));
  for (int64_t a = 0; a < mesh.num_axes(); ++a) {
    auto* chip = new AxisChip(static_cast<int>(a), mesh.axes()[static_cast<size_t>(a)], chips_row_);
    chip->setObjectName(QString("axisChip%1").arg(a));
    chips->addWidget(chip);
  }

  // One row per tensor dimension.
  const auto assignment = currentAssignment();
  for (int64_t d = 0; d < shape.rank(); ++d) {
    auto* row = new DropRow([this, d](int axis) { assignAxis(static_cast<int>(d), axis); }, dims_box_);
    row->setObjectName(QString("dropDim%1").arg(d));
    auto* h = new QHBoxLayout(row);
    h->setContentsMargins(2, 1, 2, 1);
    QString axes_text;
    const auto& on = assignment[static_cast<size_t>(d)];
    for (int64_t a : on) axes_text += Q(mesh.axes()[static_cast<size_t>(a)].name);
    int64_t ways = 1;
    for (int64_t a : on) ways *= mesh.axis_size(a);
    auto* label = new WrapLabel(QString("<b>%1%2</b> &nbsp;dim %3 &middot; %4%5")
                                 .arg(DimLetter(d), axes_text.isEmpty() ? QString() : "<sub>" + axes_text.toHtmlEscaped() + "</sub>")
                                 .arg(d)
                                 .arg(shape.dim(d))
                                 .arg(ways > 1 ? QString(" &rarr; %1 per device").arg((shape.dim(d) + ways - 1) / ways) : QString()));
    label->setPreferredWidthAtLeast(150);  // the axis buttons of the rows line up while there is room
    h->addWidget(label);
    for (int64_t a = 0; a < mesh.num_axes(); ++a) {
      auto* b = new QToolButton;
      b->setObjectName(QString("dim%1axis%2").arg(d).arg(a));
      b->setText(Q(mesh.axes()[static_cast<size_t>(a)].name));
      b->setCheckable(true);
      b->setChecked(std::find(on.begin(), on.end(), a) != on.end());
      b->setToolTip(QString("Split dimension %1 along mesh axis %2").arg(d).arg(Q(mesh.axes()[static_cast<size_t>(a)].name)));
      connect(b, &QToolButton::clicked, this, [this, d, a] { toggleAxis(static_cast<int>(d), static_cast<int>(a)); });
      h->addWidget(b);
    }
    h->addStretch();
    dims_layout_->addWidget(row);
  }
  auto* rep_row = new DropRow([this](int axis) { assignAxis(-1, axis); }, dims_box_);
  rep_row->setObjectName("dropReplicate");
  auto* rh = new QHBoxLayout(rep_row);
  rh->setContentsMargins(2, 1, 2, 1);
  rh->addWidget(new WrapLabel("<small><i>drop an axis here to stop splitting along it (replicate)</i></small>"));
  dims_layout_->addWidget(rep_row);

  refreshGrid();
}

void MeshView::refreshGrid() {
  grid_->setUpdateShards(std::nullopt);
  const Instruction* inst = selectedTensor();
  if (!inst || !inst->shape().IsArray()) return;
  const Shape& shape = inst->shape();
  const auto sh = doc_->sharding(inst->id());
  grid_->setState(doc_->mesh(), sh, shape.dims, PrimitiveTypeBytes(shape.type));
  // Weight-update sharding: the shard of this weight's update (and optimizer state) each device keeps.
  QString update_note;
  const WeightUpdateDecision* d =
      doc_->weightUpdateSharding() && analysis_ && doc_->module() ? UpdateDecisionFor(analysis_->partition(), *doc_->module(), *inst)
                                                                   : nullptr;
  if (d && static_cast<int64_t>(d->shard_of_device.size()) == doc_->mesh().num_devices()) {
    grid_->setUpdateShards(UpdateShards{d->shard_of_device, d->shards});
    QStringList aux;
    for (const Instruction* p : doc_->module()->entry()->parameters())
      if (p->name() != d->weight && p->name().rfind(d->weight + "_", 0) == 0) aux << Q(p->name());
    update_note = QString("<br><b>Weight-update sharding</b>: each device keeps and updates 1 of %1 shards of %2%3 "
                          "(%4 of %5; %6). The band on each device: the shard it keeps.")
                      .arg(d->shards)
                      .arg(Q(d->weight), aux.isEmpty() ? QString() : " and of its optimizer state (" + aux.join(", ") + ")",
                           DimsText(d->shard_dims), Q(d->format.substr(0, d->format.find(" ->"))), Q(d->scheme));
  }
  if (!sh) {
    grid_info_->setText(QString("Unsharded: every device would hold the whole tensor (%1).").arg(Q(FormatBytes(shape.ByteSize()))) +
                        update_note);
    return;
  }
  const int64_t n = doc_->mesh().num_devices();
  const int distinct = grid_->distinctShards();
  const int64_t per = BytesPerDevice(shape, sh);
  QString info = QString("%1 distinct shard%2 over %3 devices").arg(distinct).arg(distinct == 1 ? "" : "s").arg(n);
  if (distinct > 0 && n / distinct > 1 && !sh->IsMaximal()) info += QString(", each held by %1 devices (replicated)").arg(n / distinct);
  info += QString(".<br><b>%1 per device</b> of %2 in total").arg(Q(FormatBytes(per)), Q(FormatBytes(shape.ByteSize())));
  if (per > 0 && shape.ByteSize() > per) info += QString(" (1/%1)").arg(std::round(static_cast<double>(shape.ByteSize()) / per));
  info += ".";
  grid_info_->setText(info + StagesNote(grid_->pipelineStages()) + update_note);
}

bool MeshView::haloShown() const { return !halo_box_->isHidden() && halo_->halo().has_value(); }

void MeshView::setHaloDevice(int64_t device) {
  halo_device_ = device;
  refreshHalo();
}

void MeshView::refreshHalo() {
  const Instruction* inst = selectedTensor();
  std::optional<HloSharding> sh = inst ? doc_->sharding(inst->id()) : std::nullopt;
  if (!inst || inst->opcode() != Opcode::kConvolution || inst->operand_count() < 2 || !sh) {
    halo_->setHalo(std::nullopt);
    halo_box_->hide();
    grid_->setSelectedDevice(-1);
    return;
  }
  // The shardings the partitioner starts from: the conv's own (forward: its output's spatial dim
  // split) and its operands' (filter gradient: the kernel's spatial dim split, the input alike).
  const ConvShardings shardings{doc_->sharding(inst->operand(0)->id()), doc_->sharding(inst->operand(1)->id()), *sh};
  bool kernel_split = false;
  if (shardings.rhs && shardings.rhs->IsTiled())
    for (int64_t d : inst->conv_dims.kernel_spatial) kernel_split |= shardings.rhs->DimensionTiles(d) > 1;
  if (!sh->IsTiled() && !kernel_split) {
    halo_->setHalo(std::nullopt);
    halo_box_->hide();
    grid_->setSelectedDevice(-1);
    return;
  }
  int64_t device = halo_device_;
  auto halo = device >= 0 ? ConvHaloForDevice(*inst, shardings, device) : Result<ConvHalo>(Error("no device"));
  if (!halo.ok()) {
    // The default: the first device whose tile has neighbours on both sides (else the first
    // with a halo, else device 0 for the message).
    device = std::max<int64_t>(0, ConvHaloDefaultDevice(*inst, shardings));
    halo = ConvHaloForDevice(*inst, shardings, device);
  }
  if (!halo.ok()) {
    halo_->setHalo(std::nullopt);
    halo_info_->setBreakableText(Q(halo.error().message).toHtmlEscaped());
    halo_box_->setVisible(inst->shape().IsArray());
    grid_->setSelectedDevice(-1);
    return;
  }
  // "N rows from device 0" per side, per dim.
  auto from = [](const HaloDim& d, bool left) {
    QStringList senders;
    for (const HaloSlab& s : d.slabs)
      if (left ? s.hop < 0 : s.hop > 0) senders << QString::number(s.from_device);
    const int64_t rows = left ? d.left : d.right;
    if (rows == 0) {
      const bool edge = left ? d.tile == 0 : d.tile == d.tiles - 1;
      return QString("none from the %1 (%2)").arg(left ? "left" : "right", edge ? "the array's edge" : "not needed");
    }
    return QString("%1 row%2 from device %3").arg(rows).arg(rows == 1 ? "" : "s").arg(senders.join("/"));
  };
  QStringList parts;
  for (const HaloDim& d : halo->dims) parts << QString("dim %1: %2, %3").arg(d.input_dim).arg(from(d, true), from(d, false));
  const QString conv = Q(halo->conv).toHtmlEscaped(), input = Q(halo->input).toHtmlEscaped();
  QString text;
  if (halo->partial_sums()) {
    QStringList taps;
    for (const HaloDim& d : halo->dims)
      if (d.split == HaloSplit::kKernel) taps << QString("rows %1\u2013%2").arg(d.kernel_begin).arg(d.kernel_end - 1);
    text = QString("Device <b>%1</b> computes a partial filter gradient <b>%2</b> from its slab of <b>%3</b> and of "
                   "<b>%4</b> (kernel split: %5) plus the rows of <b>%3</b> its neighbours send (collective-permutes): "
                   "%6; the partial sums are all-reduced. Click a device above to see its halo.")
               .arg(device)
               .arg(conv, input, Q(halo->kernel).toHtmlEscaped(), taps.join(", "), parts.join("; "));
  } else {
    text = QString("Device <b>%1</b> runs its part of <b>%2</b> on its slab of <b>%3</b> plus the rows its "
                   "neighbours send (collective-permutes): %4. Click a device above to see its halo.")
               .arg(device)
               .arg(conv, input, parts.join("; "));
  }
  halo_info_->setBreakableText(text);
  grid_->setSelectedDevice(device);
  halo_->setHalo(std::move(halo).value());
  halo_box_->show();
  if (reveal_halo_) revealHalo();
}

void MeshView::revealHalo() {
  reveal_halo_ = true;
  if (!haloShown()) return;
  reveal_halo_ = false;
  // Now, and while the layout makes room for the box (its resizes, for a moment).
  revealing_ = true;
  scrollToHalo();
  QTimer::singleShot(600, this, [this] { revealing_ = false; });
}

void MeshView::scrollToHalo() {
  // Vertically only: the box's bottom in view, its top never above the viewport.
  QScrollBar* v = scroll_->verticalScrollBar();
  const int top = halo_box_->mapTo(scroll_->widget(), QPoint(0, 0)).y();
  const int bottom = top + halo_box_->height();
  v->setValue(std::min(top, std::max(v->value(), bottom - scroll_->viewport()->height())));
}

bool MeshView::eventFilter(QObject* watched, QEvent* event) {
  if (watched == halo_box_ && revealing_ && (event->type() == QEvent::Resize || event->type() == QEvent::Move)) {
    QTimer::singleShot(0, this, [this] { scrollToHalo(); });
  }
  return QWidget::eventFilter(watched, event);
}

bool MeshView::annotateWith(const std::vector<std::vector<int64_t>>& dims) {
  const Instruction* inst = selectedTensor();
  if (!inst || !inst->shape().IsArray()) {
    emit message("Select an array-shaped tensor first.");
    return false;
  }
  AxisAssignment assignment;
  assignment.dim_axes = dims;
  auto s = MeshShard(inst->shape().rank(), doc_->mesh(), assignment);
  if (!s.ok()) {
    emit message(Q(s.error().message));
    return false;
  }
  return doc_->annotate(inst->id(), *s);
}

QMimeData* MeshView::axisMimeData(int axis) {
  auto* mime = new QMimeData;
  mime->setData(kAxisMime, QByteArray::number(axis));
  return mime;
}

bool MeshView::toggleAxis(int dim, int axis) {
  auto dims = currentAssignment();
  if (dim < 0 || dim >= static_cast<int>(dims.size()) || axis < 0 || axis >= doc_->mesh().num_axes()) return false;
  auto& on = dims[static_cast<size_t>(dim)];
  auto it = std::find(on.begin(), on.end(), axis);
  if (it != on.end()) {
    on.erase(it);
  } else {
    for (auto& other : dims) other.erase(std::remove(other.begin(), other.end(), axis), other.end());
    on.push_back(axis);
  }
  return annotateWith(dims);
}

bool MeshView::assignAxis(int dim, int axis) {
  auto dims = currentAssignment();
  if (dims.empty() || axis < 0 || axis >= doc_->mesh().num_axes() || dim >= static_cast<int>(dims.size())) return false;
  for (auto& other : dims) other.erase(std::remove(other.begin(), other.end(), axis), other.end());
  if (dim >= 0) dims[static_cast<size_t>(dim)].push_back(axis);
  return annotateWith(dims);
}

bool MeshView::applyNamedAxes(const QString& text) {
  const Instruction* inst = selectedTensor();
  if (!inst || !inst->shape().IsArray()) {
    emit message("Select an array-shaped tensor first.");
    return false;
  }
  auto s = ParseNamedAxes(text.trimmed().toStdString(), inst->shape().rank(), doc_->mesh());
  if (!s.ok()) {
    const QString why = QString("Cannot read \"%1\": %2").arg(text, Q(s.error().message));
    markNamedAxes(why);
    emit message(why);
    return false;
  }
  // The document says why it refuses an annotation (errorOccurred): shown under the field too.
  QString refused;
  auto c = connect(doc_, &DocumentModel::errorOccurred, this, [&refused](const QString& m) { refused = m; });
  const bool ok = doc_->annotate(inst->id(), *s);
  disconnect(c);
  markNamedAxes(ok ? QString() : refused);
  return ok;
}

void MeshView::markNamedAxes(const QString& error) {
  if (error.isEmpty()) {
    if (named_error_->isHidden()) return;
    named_->setStyleSheet(QString());
    named_->setProperty("invalid", false);
    named_error_->hide();
    named_error_->clear();
    return;
  }
  named_->setProperty("invalid", true);
  named_->setStyleSheet("QLineEdit { border: 2px solid #d32f2f; border-radius: 3px; }");
  named_error_->setText(QString("<span style='color:#d32f2f'>\u26A0 %1</span>").arg(error.toHtmlEscaped()));
  named_error_->show();
  named_->setFocus(Qt::OtherFocusReason);
  named_->selectAll();
}

bool MeshView::replicateSelected() {
  const Instruction* inst = selectedTensor();
  if (!inst) return false;
  return doc_->annotate(inst->id(), HloSharding::Replicate());
}

bool MeshView::clearSelectedAnnotation() {
  const Instruction* inst = selectedTensor();
  return inst && doc_->clearAnnotation(inst->id());
}

bool MeshView::setAxisSize(int axis, int size) {
  if (!doc_ || axis < 0 || axis >= doc_->mesh().num_axes() || size < 1) return false;
  auto axes = doc_->mesh().axes();
  axes[static_cast<size_t>(axis)].size = size;
  return doc_->setMesh(DeviceMesh(axes));
}

bool MeshView::setAxisName(int axis, const QString& name) {
  if (!doc_ || axis < 0 || axis >= doc_->mesh().num_axes()) return false;
  const QString n = name.trimmed();
  auto axes = doc_->mesh().axes();
  if (Q(axes[static_cast<size_t>(axis)].name) == n) return true;
  if (n.isEmpty() || doc_->mesh().AxisIndex(n.toStdString()) >= 0) {
    emit message(QString("Axis names must be unique and not empty (\"%1\").").arg(n));
    rebuildAxes();
    return false;
  }
  axes[static_cast<size_t>(axis)].name = n.toStdString();
  return doc_->setMesh(DeviceMesh(axes, doc_->mesh().device_order()));
}

bool MeshView::addAxis() {
  if (!doc_) return false;
  auto axes = doc_->mesh().axes();
  static const char* kNames[] = {"X", "Y", "Z", "W", "V", "U", "T", "S"};
  std::string name;
  for (const char* c : kNames) {
    if (doc_->mesh().AxisIndex(c) < 0) {
      name = c;
      break;
    }
  }
  if (name.empty()) name = "A" + std::to_string(axes.size());
  axes.push_back({name, 1});
  return doc_->setMesh(DeviceMesh(axes, doc_->mesh().device_order()));
}

bool MeshView::removeAxis(int axis) {
  if (!doc_ || doc_->mesh().num_axes() <= 1 || axis < 0 || axis >= doc_->mesh().num_axes()) return false;
  auto axes = doc_->mesh().axes();
  axes.erase(axes.begin() + axis);
  return doc_->setMesh(DeviceMesh(axes));
}

}  // namespace shardscope::views
