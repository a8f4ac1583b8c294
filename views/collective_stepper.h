// Teaching mode: step through one collective on the mesh. The panel draws the device mesh (2-D as a
// grid, 1-D as a row, 3-D and larger as slices, like the mesh view) with every device as a tile of
// cells showing what it holds (one cell per member of its replica group, coloured by the member the
// data comes from, filled as far as it has arrived or been summed), the current step's transfers as
// arrows (one colour per replica group; dashed for half a shard; a ⊕ head where the receiver adds;
// curved round the outside for wraparound links), Previous / Play / Next and a step slider, a caption
// saying what happens in the step, and the cost formula with the numbers filled in.
//
// No algorithm lives here: the steps are the simulator's walkthrough (simulator/collective_steps.h)
// of the algorithm its cost model times.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <QWidget>

#include "core/sharding/mesh.h"
#include "partitioner/spmd/all_to_all_pieces.h"
#include "partitioner/spmd/spmd_partitioner.h"
#include "simulator/collectives/walkthrough.h"
#include "simulator/topology.h"
#include "views/mesh_grid.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QPushButton;
class QSlider;
class QTimer;

namespace shardscope::views {

// The simulator's value types (RunResult, CollectiveCost, ...) are used as they are.
using namespace ::shardscope::sim;

// A collective to step through on a mesh.
struct TeachingRequest {
  std::string title;  // one line above the mesh ("all-gather.3 for dot.1: ...")
  CollectiveKind kind = CollectiveKind::kAllGather;
  DeviceMesh mesh;
  std::vector<std::vector<int64_t>> groups;        // empty: one group of every device
  std::vector<std::pair<int64_t, int64_t>> pairs;  // collective-permute: source -> target
  double operand_bytes = 0;  // per device (all-gather: the shard; the others: the whole buffer)
  std::string chip;          // a chip preset; "" : the default chip
  TopologyOptions::Wraparound wraparound = TopologyOptions::Wraparound::kGenerationRule;
  bool bidirectional = true;  // rings use both directions of every link
  // All-to-all: what piece i -> j carries, by group position (WalkthroughOptions::piece_names),
  // and one sentence saying what moves (DescribeAllToAllPieces); empty: unnamed pieces.
  std::vector<std::vector<std::string>> piece_names;
  std::string pieces_summary;
  // Collective-permute: a pipeline's shifting-buffer shift (captioned as such, not as a halo exchange).
  bool pipeline_shift = false;
};

// The request with the simulator's walkthrough of it, or why there is none.
struct TeachingPlan {
  bool ok = false;
  std::string message;      // why it failed (a person can act on it)
  TeachingRequest request;  // what was asked (chip filled in)
  std::string title;
  std::string topology;     // the slice, described
  CollectiveWalkthrough walk;
};

// Plans the walkthrough (quick for meshes of a few hundred devices; runs on the calling thread).
TeachingPlan PlanTeaching(const TeachingRequest& request, const std::string& default_chip);
// A collective of the partitioned program (its participant groups; a collective-permute's
// source-target pairs as two-element groups) on the document's mesh.
// With the original module and its shardings, a resharding all-to-all's pieces are named in the
// tensor's terms ("tokens of group 3 for expert 5": partitioner/spmd/all_to_all_pieces.h).
TeachingRequest TeachingRequestFor(const InsertedCollective& collective, const std::vector<std::vector<int64_t>>& participants,
                                   const DeviceMesh& mesh, const Module* original = nullptr,
                                   const ShardingLookup& sharding_of = {});
// "device 3 → device 5: tokens of group 3 for expert 5", one line per piece of a named all-to-all
// (source and destination device, the first group's pieces; those arriving in `step` first,
// marked ▶, when step > 0); empty for other collectives.
std::vector<std::string> TeachingPieceLines(const TeachingPlan& plan, int step);

struct TeachingExample {
  std::string name;   // "all-gather-ring"
  std::string title;  // "All-gather over X — a ring of 4 (4×4 torus)"
};
// Ready-made collectives to explore without partitioning anything; the first is the default.
std::vector<TeachingExample> TeachingExamples();
// The request for an example; nullopt for an unknown name.
std::optional<TeachingRequest> TeachingExampleRequest(const std::string& name);

// The painted mesh with the holdings and arrows of one step.
class TeachingCanvas : public QWidget {
  Q_OBJECT
 public:
  explicit TeachingCanvas(QWidget* parent = nullptr);
  // `plan` must outlive the canvas or the next setPlan; step 0 is the start (no arrows).
  void setPlan(const TeachingPlan* plan);
  void setStep(int step);
  int step() const { return step_; }

  // What the last paint drew (for tests and tooltips): arrows after merging transfers between the
  // same two devices, of which wraparound (curved round the outside) and dashed (half) arrows.
  struct PaintStats {
    int arrows = 0;
    int wraparound = 0;
    int dashed = 0;
    int reduce = 0;
    int tiles = 0;
  };
  PaintStats lastPaintStats() const { return stats_; }
  // Where a device's tile is drawn at the current size (empty when it is not drawn).
  QRectF tileRect(int64_t device) const;
  QColor groupColor(int64_t group) const;

  QSize sizeHint() const override { return QSize(560, 380); }
  QSize minimumSizeHint() const override { return QSize(220, 160); }

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;  // tooltips

 private:
  struct Geometry : MeshGrid {
    bool lanes = false;  // room between rows/columns for wraparound arcs
  };
  Geometry geometry() const;
  const std::vector<DeviceHolding>& devices() const;
  const std::vector<StepTransfer>& transfers() const;
  int tileAt(const QPointF& p) const;

  const TeachingPlan* plan_ = nullptr;
  int step_ = 0;
  std::vector<int64_t> tile_of_device_;   // device -> index in mesh order (-1: not drawn)
  std::vector<int64_t> device_at_tile_;   // mesh order -> device
  std::vector<std::vector<int64_t>> coords_;  // mesh order -> coordinates
  PaintStats stats_;
};

class CollectiveStepper : public QWidget {
  Q_OBJECT
 public:
  explicit CollectiveStepper(QWidget* parent = nullptr);

  // The chips to choose from and the one a request without a chip uses.
  void setChips(const std::vector<std::string>& chips, const std::string& default_chip);
  // Plans `request` and shows its start. Returns false (and shows why) when it cannot be planned.
  bool setRequest(const TeachingRequest& request);
  // A collective of the partitioned program on the document's mesh, with the default chip.
  bool showCollective(const InsertedCollective& collective, const std::vector<std::vector<int64_t>>& participants,
                      const DeviceMesh& mesh, const Module* original = nullptr, const ShardingLookup& sharding_of = {});
  // One of TeachingExamples() by name.
  bool showExample(const QString& name);
  bool hasPlan() const { return plan_.ok; }
  // Nothing shown (a new module: its collectives are not the old one's).
  void clear();
  const TeachingPlan& plan() const { return plan_; }

  int stepCount() const { return static_cast<int>(plan_.walk.steps.size()); }
  int currentStep() const { return step_; }  // 0: the start, before step 1
  void setStep(int step);
  // The transfers drawn now (empty at the start) and what each device holds now.
  const std::vector<StepTransfer>& currentTransfers() const;
  const std::vector<DeviceHolding>& currentDevices() const;
  QString captionText() const;
  QString formulaText() const;   // the formula line, legend and the book's form, as plain text
  QString titleText() const;
  // What the pieces of a named all-to-all carry (TeachingPieceLines), as shown; "" otherwise.
  QString piecesText() const;
  bool isPlaying() const;
  void setPlayInterval(int ms);  // time per step when playing (default 1.4 s)

  TeachingCanvas* canvas() const { return canvas_; }
  QComboBox* exampleBox() const { return examples_; }
  QComboBox* chipBox() const { return chip_; }
  QComboBox* wraparoundBox() const { return wrap_; }
  QPushButton* nextButton() const { return next_; }
  QPushButton* previousButton() const { return prev_; }
  QPushButton* playButton() const { return play_; }
  QSlider* slider() const { return slider_; }

 public slots:
  void next();
  void previous();
  void play();
  void pause();
  void togglePlay();

 signals:
  void stepChanged(int step);
  void planChanged();

 private:
  void replan();
  void refresh();
  void syncControls();

  TeachingRequest request_;
  TeachingPlan plan_;
  std::string default_chip_;
  int step_ = 0;
  bool updating_ = false;

  QComboBox* examples_;
  QComboBox* chip_;
  QComboBox* wrap_;
  QCheckBox* bidirectional_;
  QLabel* title_;
  QLabel* summary_;
  TeachingCanvas* canvas_;
  QLabel* legend_;
  QPushButton* prev_;
  QPushButton* play_;
  QPushButton* next_;
  QSlider* slider_;
  QLabel* step_label_;
  QLabel* caption_;
  QLabel* pieces_;
  QLabel* formula_;
  QTimer* timer_;
};

}  // namespace shardscope::views
