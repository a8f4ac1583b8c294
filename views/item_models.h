// Item models over the document: every instruction with its sharding (the instruction table), the
// collectives the partitioner inserted, and the history of simulation runs. Each one is exercised
// under QAbstractItemModelTester in tests/test_gui_models.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include <QAbstractTableModel>
#include <QPointer>

#include "simulator/run_result.h"
#include "views/engine.h"

namespace shardscope {
class Instruction;
}

namespace shardscope::views {

class Document;

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
  void setDocument(Document* doc);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  int64_t idAt(int row) const;
  int rowOf(int64_t id) const;  // -1 when absent

 private:
  void reload();
  void shardingsChanged();
  QPointer<Document> doc_;
  std::vector<const Instruction*> rows_;
};

// The collectives of the last partitioning.
class CollectiveTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kKind, kInstruction, kOrigin, kBytes, kGroups, kReason, kColumnCount };
  explicit CollectiveTableModel(QObject* parent = nullptr);
  void setCollectives(std::vector<CollectiveInfo> collectives);
  const CollectiveInfo* at(int row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::vector<CollectiveInfo> rows_;
};

// Stored simulation runs (RunStore::ListRuns), newest last.
class RunHistoryModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kId, kLabel, kCreated, kMesh, kChip, kStepTime, kPeakMemory, kMfu, kColumnCount };
  static constexpr int kRunIdRole = Qt::UserRole + 1;
  explicit RunHistoryModel(QObject* parent = nullptr);

  void setRuns(std::vector<RunOverview> runs);  // replaces everything
  void addRun(const RunOverview& run);          // appends one row
  bool removeRun(int64_t run_id);
  bool setLabel(int64_t run_id, const QString& label);
  const RunOverview* at(int row) const;

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
};

// "1.23 ms", "45.6 µs", "2.00 s".
QString FormatSeconds(double s);

}  // namespace shardscope::views
