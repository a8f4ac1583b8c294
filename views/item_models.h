// Item models over the document: every instruction with its sharding (the instruction table), the
// collectives the partitioner inserted, and the history of simulation runs. Each one is exercised
// under QAbstractItemModelTester in tests/test_gui_models.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <QAbstractTableModel>
#include <QPointer>

#include "partitioner/spmd/spmd_partitioner.h"
#include "simulator/collectives/cost.h"
#include "simulator/run_result.h"

namespace shardscope {
class Instruction;
}

namespace shardscope::views {

// The simulator's value types (RunResult, CollectiveCost, ...) are used as they are.
using namespace ::shardscope::sim;

class DocumentModel;

// One row per instruction (entry computation first, then the others in module order).
class InstructionTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kName, kOpcode, kShape, kSharding, kOrigin, kLocalShape, kBytesPerDevice, kColumnCount };
  // Role returning the instruction id (qint64) of a row, in any column.
  static constexpr int kIdRole = Qt::UserRole + 1;
  // Role returning a value to sort by (numbers for the byte column).
  static constexpr int kSortRole = Qt::UserRole + 2;

  explicit InstructionTableModel(QObject* parent = nullptr);
  void setDocument(DocumentModel* doc);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  int64_t idAt(int row) const;
  int rowOf(int64_t id) const;  // -1 when absent

 private:
  void reload();
  void shardingsChanged();
  QPointer<DocumentModel> doc_;
  std::vector<const Instruction*> rows_;
};

// The collectives the partitioner inserted into the last partitioned program, with the simulator's
// estimate of each.
class CollectiveTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kKind, kInstruction, kOrigin, kBytes, kTime, kGroups, kReason, kColumnCount };
  // Role returning a number to sort by (bytes, seconds).
  static constexpr int kSortRole = Qt::UserRole;
  explicit CollectiveTableModel(QObject* parent = nullptr);
  // `estimates` has one entry per program->collectives (nullopt: no estimate); the chip names them.
  void setProgram(std::shared_ptr<const PartitionResult> program, std::vector<std::optional<CollectiveCost>> estimates,
                  const std::string& chip);
  void clear();
  const InsertedCollective* at(int row) const;
  const CollectiveCost* estimate(int row) const;
  // Who takes part (core/collectives/participants.h): the replica groups as device ids; a
  // collective-permute's (source, target) pairs as two-element groups. Empty: every device.
  const std::vector<std::vector<int64_t>>& participants(int row) const;
  // A halo exchange: a collective-permute the partitioner inserted to exchange halos.
  bool isHalo(int row) const;
  // Seen from one device: the groups column shows only that device's group (or its sends and
  // receives for a collective-permute) and rows it takes no part in are greyed. -1: all devices.
  void setDevice(int64_t device);
  int64_t device() const { return device_; }
  // True when `device` takes part in row's collective (always for device -1).
  bool involves(int row, int64_t device) const;
  // The groups text of `row` as seen from device_.
  QString groupsText(int row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  struct Row {
    const InsertedCollective* collective = nullptr;
    std::optional<CollectiveCost> cost;
    std::vector<std::vector<int64_t>> participants;
    bool halo = false;
  };
  std::shared_ptr<const PartitionResult> program_;
  std::vector<Row> rows_;
  std::string chip_;
  int64_t device_ = -1;
};

// Simulation runs (RunStore::ListRuns, plus runs kept in memory when no store could be opened,
// which have negative ids and show "unsaved"), oldest first. Runs of another module than the
// current one (setCurrentModule) are shown greyed.
class RunHistoryModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kId, kLabel, kModule, kCreated, kMesh, kChip, kStepTime, kPeakMemory, kBytes, kMfu, kColumnCount };
  static constexpr int kRunIdRole = Qt::UserRole + 1;
  // Role returning the raw number of a figure column (seconds, bytes, fraction) for sorting.
  static constexpr int kSortRole = Qt::UserRole + 2;
  explicit RunHistoryModel(QObject* parent = nullptr);

  void setRuns(std::vector<RunOverview> runs);  // replaces everything
  void addRun(const RunOverview& run);          // appends one row
  bool removeRun(int64_t run_id);
  bool setLabel(int64_t run_id, const QString& label);
  const RunOverview* at(int row) const;
  int rowOf(int64_t run_id) const;  // -1 when absent
  void setCurrentModule(const QString& module_name);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

 signals:
  void labelEdited(qint64 run_id, const QString& label);

 private:
  std::vector<RunOverview> rows_;
  std::string current_module_;
};

}  // namespace shardscope::views
