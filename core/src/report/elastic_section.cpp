#include "report/elastic_section.hpp"

#include <fmt/format.h>

#include "launch/elastic/elastic_log.hpp"
#include "report/html_text.hpp"

namespace rig::report {

std::string elastic_section(const std::filesystem::path& logdir) {
  const auto record = launch::elastic::read_elastic_yaml(logdir / "elastic.yaml");
  if (!record || record->attempts.empty()) return "";
  std::string rows;
  for (std::size_t i = 0; i < record->attempts.size(); ++i) {
    const auto& a = record->attempts[i];
    rows += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{} x {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td></tr>\n",
        i == 0 ? std::string("start") : fmt::format("restart {}", i), escape_html(a.hosts),
        a.processes, a.iter_size,
        a.resumed_from ? fmt::format("ckpt-{}", *a.resumed_from) : std::string("step 0"),
        a.reached ? fmt::format("{}", *a.reached) : std::string("-"),
        a.exit_code ? fmt::format("{}", *a.exit_code) : std::string("running"),
        escape_html(a.failure.empty() ? std::string("-") : a.failure), a.lost_steps,
        a.downtime_s ? fmt::format("{:.1f}", *a.downtime_s) : std::string("-"));
  }
  return fmt::format(
      "<section>\n<h2>Elastic restarts</h2>\n<p>{} restart(s) of at most {}; {} step(s) "
      "repeated; {:.1f} s of downtime; {} micro-batches a step throughout; {}.</p>\n"
      "<table>\n<tr><th>attempt</th><th>hosts</th><th>processes x iter_size</th><th>from</th>"
      "<th>reached step</th><th>exit</th><th>failure</th><th>steps lost</th>"
      "<th>downtime s</th></tr>\n{}</table>\n</section>\n",
      record->restarts(), record->max_restarts, record->lost_steps(), record->downtime_s(),
      record->micro_batches, escape_html(record->outcome), rows);
}

}  // namespace rig::report
