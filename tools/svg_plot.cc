#include "tools/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvtier::tools {
namespace {

constexpr double kPanelW = 560, kPanelH = 380;
constexpr double kLeft = 60, kRight = 150, kTop = 40, kBottom = 70;
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Text(double x, double y, const std::string& s, const char* anchor, int size,
                 const char* extra = "") {
  return absl::StrFormat(
      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\"%s>%s</text>\n", x, y,
      anchor, size, extra, Escape(s));
}

}  // namespace

std::string RenderSvgPlot(const std::vector<PlotPanel>& panels, const PlotAxes& axes) {
  const int cols = panels.size() > 1 ? 2 : 1;
  const int rows = static_cast<int>((panels.size() + cols - 1) / cols);
  const double width = cols * kPanelW;
  const double height = 40 + rows * kPanelH;
  std::map<std::string, int> colour;  // stable colour per series name
  for (const PlotPanel& p : panels) {
    for (const PlotSeries& s : p.series) colour.try_emplace(s.name, colour.size());
  }
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      width, height, width, height);
  svg += Text(width / 2, 26, axes.title, "middle", 17, " font-weight=\"bold\"");
  for (size_t i = 0; i < panels.size(); ++i) {
    const PlotPanel& panel = panels[i];
    const double ox = static_cast<double>(i % cols) * kPanelW;
    const double oy = 40 + static_cast<double>(i / cols) * kPanelH;
    const double x0 = ox + kLeft, x1 = ox + kPanelW - kRight;
    const double y0 = oy + kPanelH - kBottom, y1 = oy + kTop;
    double lo = 0, hi = 0, top = 0.1;
    std::vector<double> ticks;
    for (const PlotSeries& s : panel.series) {
      for (const auto& [x, y] : s.points) {
        if (x <= 0) continue;
        top = std::max(top, std::min(1.0, std::ceil(y * 10 + 1e-9) / 10));
        lo = lo == 0 ? x : std::min(lo, x);
        hi = std::max(hi, x);
        if (std::find(ticks.begin(), ticks.end(), x) == ticks.end()) ticks.push_back(x);
      }
    }
    if (lo == 0) continue;
    const double llo = std::log2(lo), lhi = std::max(std::log2(hi), llo + 1e-9);
    auto px = [&](double x) { return x0 + (std::log2(x) - llo) / (lhi - llo) * (x1 - x0); };
    auto py = [&](double y) { return y0 - std::clamp(y, 0.0, top) / top * (y0 - y1); };
    svg += Text((x0 + x1) / 2, oy + 22, panel.title, "middle", 14, " font-weight=\"bold\"");
    // Grid and y axis.
    const int tenths = static_cast<int>(std::lround(top * 10));
    for (int g = 0; g <= tenths; g += tenths > 5 ? 2 : 1) {
      const double y = py(g / 10.0);
      svg += absl::StrFormat(
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x0, y,
          x1, y);
      svg += Text(x0 - 6, y + 4, absl::StrFormat("%.1f", g / 10.0), "end", 11);
    }
    std::sort(ticks.begin(), ticks.end());
    for (double t : ticks) {
      const double x = px(t);
      svg += absl::StrFormat(
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", x, y0,
          x, y1);
      std::pair<std::string, std::string> label =
          axes.x_tick ? axes.x_tick(t) : std::make_pair(absl::StrFormat("%g", t), "");
      svg += Text(x, y0 + 16, label.first, "middle", 10);
      if (!label.second.empty()) {
        svg += Text(x, y0 + 29, label.second, "middle", 10, " fill=\"#666\"");
      }
    }
    svg += absl::StrFormat(
        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
        "stroke=\"#333\"/>\n",
        x0, y1, x1 - x0, y0 - y1);
    svg += Text((x0 + x1) / 2, y0 + 48, axes.x_label, "middle", 12);
    svg += Text(ox + 16, (y0 + y1) / 2, axes.y_label, "middle", 12,
                absl::StrFormat(" transform=\"rotate(-90 %.1f %.1f)\"", ox + 16, (y0 + y1) / 2)
                    .c_str());
    // Series and legend.
    double ly = y1 + 8;
    for (const PlotSeries& s : panel.series) {
      const char* c = kPalette[colour[s.name] % (sizeof(kPalette) / sizeof(kPalette[0]))];
      const char* dash = s.dashed ? " stroke-dasharray=\"6 4\"" : "";
      std::string pts;
      for (const auto& [x, y] : s.points) {
        if (x > 0) absl::StrAppend(&pts, absl::StrFormat("%.1f,%.1f ", px(x), py(y)));
      }
      const double w = s.bold ? 3.5 : 1.8;
      svg += absl::StrFormat(
          "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\"%s/>\n",
          pts, c, w, dash);
      for (const auto& [x, y] : s.points) {
        if (x <= 0 || s.dashed) continue;
        svg += absl::StrFormat("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                               px(x), py(y), c);
      }
      svg += absl::StrFormat(
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
          "stroke-width=\"%.1f\"%s/>\n",
          x1 + 10, ly, x1 + 34, ly, c, w, dash);
      svg += Text(x1 + 40, ly + 4, s.name, "start", 11, s.bold ? " font-weight=\"bold\"" : "");
      ly += 17;
    }
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace kvtier::tools
