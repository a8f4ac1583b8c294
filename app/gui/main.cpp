// shardscope: the GUI.
#include <QApplication>
#include <QCommandLineParser>
#include <QIcon>
#include <QLabel>
#include <QMainWindow>

#include "shardscope_version.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName("ShardScope");
  QApplication::setOrganizationName("ShardScope");
  QApplication::setApplicationVersion(SHARDSCOPE_VERSION);
  QApplication::setWindowIcon(QIcon(":/icons/shardscope.svg"));
  QCommandLineParser parser;
  parser.setApplicationDescription("Explore how an ML computation graph is sharded across a device mesh");
  parser.addHelpOption();
  parser.addVersionOption();
  parser.process(app);
  QMainWindow w;
  w.setWindowTitle("ShardScope");
  w.setCentralWidget(new QLabel("ShardScope"));
  w.resize(1400, 900);
  w.show();
  return app.exec();
}
