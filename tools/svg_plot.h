// A dependency-free SVG line chart for `kvtier replay --sweep --plot`: one panel per
// trace, x on a log2 axis with two label lines per tick (e.g. tokens and bytes), y linear
// from 0 to the panel's largest value rounded up to a tenth (at most 1), one polyline per
// series with markers and a legend.
//
// Thread-safe (pure functions).
#ifndef KVTIER_TOOLS_SVG_PLOT_H_
#define KVTIER_TOOLS_SVG_PLOT_H_

#include <string>
#include <utility>
#include <vector>

namespace kvtier::tools {

struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x > 0, y in [0, 1])
  bool dashed = false;  // bounds (belady, infinite) are drawn dashed
  bool bold = false;    // the series to look at (the default policy)
};

struct PlotPanel {
  std::string title;
  std::vector<PlotSeries> series;
};

struct PlotAxes {
  std::string title;    // over all panels
  std::string x_label;  // e.g. "hot capacity (tokens / fp16 bytes)"
  std::string y_label;  // e.g. "prefix hit rate"
  // Labels of an x tick: up to two lines (e.g. "750K tok", "94 GiB").
  std::pair<std::string, std::string> (*x_tick)(double x) = nullptr;
};

// Returns a complete SVG document. Panels are laid out two per row. Series keep their
// colour by name across panels. Points with x <= 0 are skipped.
std::string RenderSvgPlot(const std::vector<PlotPanel>& panels, const PlotAxes& axes);

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_SVG_PLOT_H_
