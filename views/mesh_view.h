// The device mesh: axes named and resized with spin boxes, drawn as a grid of devices (3-D and
// larger meshes as slices). With a tensor selected, its dimensions are assigned to mesh axes by
// clicking the axis buttons of a dimension, dragging an axis chip onto a dimension, or typing the
// named-axis notation ([I_X, J_Y]). The grid shows which shard each device holds (one colour per
// distinct shard, so replication is visible) and the bytes per device. Every edit is an undoable
// command on the DocumentModel.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <QPointer>
#include <QWidget>

#include "core/sharding/mesh.h"
#include "core/sharding/sharding.h"
#include "views/mesh_grid.h"
#include "views/pipeline_stages.h"

class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QVBoxLayout;
class QGridLayout;

namespace shardscope {
class Instruction;
}

class QMimeData;
class QScrollArea;

namespace shardscope::views {

class AnalysisModel;
class DocumentModel;

// With weight-update sharding (paper 000): which shard of the selected weight's update (and of its
// optimizer state) each device keeps, from the pass's decision in the partitioned program.
struct UpdateShards {
  std::vector<int64_t> shard_of_device;  // per device
  int64_t shards = 1;
};

// What one device holds of the selected tensor.
struct DeviceTile {
  int64_t device = -1;
  std::vector<int64_t> coords;      // mesh coordinates
  int shard = -1;                   // index of the distinct shard held (-1: holds nothing)
  std::vector<int64_t> tile_index;  // per tensor dim
  QString ranges;                   // "0:4, 0:1024"
  int64_t bytes = 0;
};

// The painted device grid.
class DeviceGridWidget : public QWidget {
  Q_OBJECT
 public:
  explicit DeviceGridWidget(QWidget* parent = nullptr);
  // `sharding` empty: just the devices. `dims`/`element_bytes` describe the selected tensor.
  void setState(const DeviceMesh& mesh, const std::optional<HloSharding>& sharding, const std::vector<int64_t>& dims,
                int64_t element_bytes);
  const std::vector<DeviceTile>& tiles() const { return tiles_; }
  // Where the tile at `index` (mesh order, as tiles()) is painted at the widget's width.
  QRectF tileRect(int index) const;
  int distinctShards() const { return distinct_; }
  // The pipeline stage each device holds (and its layers), painted at the foot of each tile;
  // nullopt: the module is not pipelined (pipeline_stages.h).
  void setPipelineStages(std::optional<PipelineStageLayout> stages);
  const std::optional<PipelineStageLayout>& pipelineStages() const { return stages_; }
  // The device whose view is shown elsewhere (the halo below the grid): outlined; -1 none.
  void setSelectedDevice(int64_t device);
  int64_t selectedDevice() const { return selected_device_; }
  // The update shard each device keeps, painted at the foot of each tile; nullopt: none shown.
  void setUpdateShards(std::optional<UpdateShards> shards);
  const std::optional<UpdateShards>& updateShards() const { return update_shards_; }
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;
  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int width) const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;  // tooltips
  void mouseReleaseEvent(QMouseEvent* event) override;

 signals:
  void deviceClicked(qint64 device);

 private:
  MeshGrid geometryFor(int width) const;
  int tileAt(const QPointF& p) const;

  DeviceMesh mesh_;
  std::optional<HloSharding> sharding_;
  std::vector<DeviceTile> tiles_;  // in mesh order (row-major over the axes)
  int distinct_ = 0;
  std::optional<PipelineStageLayout> stages_;
  int64_t selected_device_ = -1;
  std::optional<UpdateShards> update_shards_;
};

class HaloSlabsWidget;
class NameWrapLabel;

class MeshView : public QWidget {
  Q_OBJECT
 public:
  explicit MeshView(QWidget* parent = nullptr);
  void setDocument(DocumentModel* doc);
  // The analysis whose partitioned program (with weight-update sharding on) says which update
  // shard of a weight each device keeps.
  void setAnalysis(AnalysisModel* analysis);
  // The note under the grid ("3 distinct shards ...; weight-update sharding: ...").
  QLabel* gridInfo() const { return grid_info_; }

  // ---- API used by the widgets and by tests (each is one undoable edit) ----
  // Adds or removes mesh axis `axis` on tensor dim `dim` of the selected tensor (an axis is on at
  // most one dim; turning it on elsewhere moves it).
  bool toggleAxis(int dim, int axis);
  // What an axis chip carries when dragged (the drop rows "dropDim<d>" and "dropReplicate"
  // accept it).
  static QMimeData* axisMimeData(int axis);
  // Moves mesh axis `axis` to tensor dim `dim` (-1: no dim, i.e. replicate along it).
  bool assignAxis(int dim, int axis);
  // "[I_X, J_Y]" / "A[I_XY, J]" for the selected tensor.
  bool applyNamedAxes(const QString& text);
  bool replicateSelected();
  bool clearSelectedAnnotation();
  bool setAxisSize(int axis, int size);
  bool setAxisName(int axis, const QString& name);
  bool addAxis();
  bool removeAxis(int axis);

  // The selected tensor's per-dim mesh axes as the view shows them (empty when none selected).
  std::vector<std::vector<int64_t>> currentAssignment() const;
  DeviceGridWidget* grid() const { return grid_; }
  // A spatially sharded convolution selected: the halo of the selected device (clicking a device
  // in the grid selects it; by default an inner device of the first split dim). Hidden otherwise.
  HaloSlabsWidget* haloView() const { return halo_; }
  bool haloShown() const;
  void setHaloDevice(int64_t device);  // -1: the default
  // Scrolls the view to the halo box (now, or as soon as a convolution's halo is shown).
  void revealHalo();
  QLineEdit* namedAxesField() const { return named_; }
  // Why the last typed sharding was refused (hidden when it was accepted or edited since).
  QLabel* namedAxesError() const { return named_error_; }

 signals:
  void message(const QString& text);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void rebuildAxes();
  void rebuildTensor();
  void refreshGrid();
  void refreshHalo();
  void scrollToHalo();
  bool annotateWith(const std::vector<std::vector<int64_t>>& dims);
  // Marks the named-axes field with `error` (red border, the message under it); "" clears it.
  void markNamedAxes(const QString& error);
  const Instruction* selectedTensor() const;

  QPointer<DocumentModel> doc_;
  QPointer<AnalysisModel> analysis_;
  QWidget* axes_box_;
  QGridLayout* axes_grid_;
  QLabel* mesh_summary_;
  NameWrapLabel* tensor_title_;
  NameWrapLabel* tensor_state_;
  QWidget* chips_row_;
  QWidget* dims_box_;
  QVBoxLayout* dims_layout_;
  QLineEdit* named_;
  QPushButton* apply_named_;
  QLabel* named_error_;
  QPushButton* add_axis_;
  QPushButton* replicate_;
  QPushButton* clear_;
  DeviceGridWidget* grid_;
  QLabel* grid_info_;
  QWidget* halo_box_;
  NameWrapLabel* halo_info_;
  HaloSlabsWidget* halo_;
  int64_t halo_device_ = -1;
  bool reveal_halo_ = false;
  bool revealing_ = false;
  QScrollArea* scroll_ = nullptr;
  bool rebuilding_ = false;
};

}  // namespace shardscope::views
