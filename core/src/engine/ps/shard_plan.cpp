// The shard plan: where the S-1 cuts of the flat parameter buffer go.
//
// Admissible boundaries are the parameter ends, and with split_parameters also
// the row boundaries inside each parameter (a 0-d or 1-row parameter has only
// its ends). Number them 0 .. R in buffer order: boundary 0 is element 0,
// boundary R is element T (the total), so R is the number of pieces (rows, or
// non-empty parameters) and at most R servers can each get one.
//
// For k = 1 .. S-1 the ideal cut is round(k*T/S) (halves up); cut k is the
// boundary nearest it (ties to the lower one), which is also the nearest
// boundary inside the parameter containing the ideal. Then cut k's boundary
// index is clamped to [index of cut k-1 + 1, R - (S-k)]: a cut not above the
// previous one moves up to the next boundary, and one that leaves too few
// boundaries for the cuts after it moves down, so the cuts stay strictly
// increasing inside (0, T) and every shard is non-empty.
//
// Guarantee: let G be the largest gap between adjacent boundaries (the largest
// row when splitting, the largest parameter when not). If T >= S*G, no clamp
// moves a cut and every shard holds T/S elements give or take strictly less
// than G: each cut lies in (k*T/S - (G+1)/2, k*T/S + G/2], and for either
// parity of G the half-up rounding and the ties to the lower boundary narrow
// that to a half-open interval of width G. With fewer elements the clamps may
// unbalance the shards, but they stay non-empty and deterministic.
#include "engine/ps/shard_plan.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "rig/byte_size.hpp"
#include "rig/error.hpp"

namespace rig::engine::ps {
namespace {

// A non-empty parameter's run of boundaries: boundary `first + j` (j = 1 ..
// rows) is element offset + j * row.
struct Run {
  std::int64_t offset = 0;
  std::int64_t numel = 0;
  std::int64_t row = 0;    // elements between adjacent boundaries
  std::int64_t first = 0;  // index of the boundary at `offset`
};

std::vector<std::int64_t> checked_numels(const std::vector<ParameterExtent>& parameters) {
  std::vector<std::int64_t> numels;
  numels.reserve(parameters.size());
  std::int64_t expected = 0;
  for (const auto& p : parameters) {
    if (p.offset != expected) {
      throw std::invalid_argument(fmt::format(
          "plan_shards: parameter '{}' starts at element {}, expected {} (the extents must be "
          "contiguous and in order from 0)",
          p.name, p.offset, expected));
    }
    numels.push_back(shape_numel(p.shape));
    expected += numels.back();
  }
  return numels;
}

std::int64_t rows_of(const Shape& shape) {
  return shape.empty() ? 1 : shape[0];
}

// round(k * total / servers), halves up, without forming k * total.
std::int64_t ideal_cut(std::int64_t k, std::int64_t total, std::int64_t servers) {
  const std::int64_t r = k * (total % servers);  // < servers^2
  const std::int64_t exact = k * (total / servers) + r / servers;
  return exact + (2 * (r % servers) >= servers ? 1 : 0);
}

class Boundaries {
 public:
  Boundaries(const std::vector<ParameterExtent>& parameters,
             const std::vector<std::int64_t>& numels, bool split) {
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      if (numels[i] == 0) continue;
      const std::int64_t rows = split ? rows_of(parameters[i].shape) : 1;
      runs_.push_back({parameters[i].offset, numels[i], numels[i] / rows, count_});
      count_ += rows;
    }
  }

  std::int64_t pieces() const { return count_; }  // R

  std::int64_t element(std::int64_t index) const {
    if (index == 0) return 0;
    const Run& run = *(std::upper_bound(runs_.begin(), runs_.end(), index,
                                        [](std::int64_t i, const Run& r) { return i <= r.first; }) -
                       1);
    return run.offset + (index - run.first) * run.row;
  }

  // The boundary nearest element `x` (0 <= x <= T), ties to the lower one.
  std::int64_t nearest(std::int64_t x) const {
    if (runs_.empty() || x >= runs_.back().offset + runs_.back().numel) return count_;
    const Run& run = *(std::upper_bound(runs_.begin(), runs_.end(), x,
                                        [](std::int64_t v, const Run& r) { return v < r.offset; }) -
                       1);
    const std::int64_t into = x - run.offset;
    const std::int64_t j = into / run.row;
    const std::int64_t past = into % run.row;
    return run.first + j + (run.row - past < past ? 1 : 0);
  }

 private:
  std::vector<Run> runs_;
  std::int64_t count_ = 0;
};

[[noreturn]] void too_many_servers(std::size_t parameters, std::int64_t total, int servers,
                                   std::int64_t pieces, bool split) {
  const std::int64_t most = std::max<std::int64_t>(pieces, 1);
  if (split) {
    throw UserError(fmt::format(
        "cannot split {} parameter row(s) ({} elements) among {} servers: each server needs at "
        "least one row of a parameter; use at most {} server(s)",
        pieces, total, servers, most));
  }
  throw UserError(fmt::format(
      "cannot split {} parameter(s) ({} elements) among {} servers: each server needs at least "
      "one whole parameter; use at most {} server(s)",
      parameters, total, servers, most));
}

ShardPiece piece_of(const std::vector<ParameterExtent>& parameters, std::size_t index,
                    std::int64_t numel, std::int64_t begin, std::int64_t end) {
  const ParameterExtent& p = parameters[index];
  ShardPiece piece{index, p.name, p.shape, begin, end - begin, numel};
  if (!piece.whole()) piece.shape[0] = piece.numel / (numel / p.shape[0]);
  return piece;
}

}  // namespace

std::vector<Shard> plan_shards(const std::vector<ParameterExtent>& parameters, int servers,
                               bool split_parameters) {
  if (servers < 1) {
    throw UserError(
        fmt::format("the number of parameter servers must be at least 1, found {}", servers));
  }
  const std::vector<std::int64_t> numels = checked_numels(parameters);
  const std::int64_t total = parameters.empty() ? 0 : parameters.back().offset + numels.back();
  const Boundaries boundaries(parameters, numels, split_parameters);
  const std::int64_t count = static_cast<std::int64_t>(servers);
  const std::int64_t pieces = boundaries.pieces();
  if (servers > 1 && pieces < count) {
    const auto nonempty = static_cast<std::size_t>(
        std::count_if(numels.begin(), numels.end(), [](std::int64_t n) { return n > 0; }));
    too_many_servers(nonempty, total, servers, pieces, split_parameters);
  }

  std::vector<Shard> shards(static_cast<std::size_t>(servers));
  std::int64_t previous = 0;  // boundary index of the previous cut
  for (std::int64_t k = 1; k < count; ++k) {
    const std::int64_t nearest = boundaries.nearest(ideal_cut(k, total, count));
    previous = std::clamp(nearest, previous + 1, pieces - (count - k));
    const std::int64_t cut = boundaries.element(previous);
    shards[static_cast<std::size_t>(k - 1)].end = cut;
    shards[static_cast<std::size_t>(k)].begin = cut;
  }
  shards.back().end = total;

  // Each parameter's pieces, in order; a zero-size parameter joins the shard
  // that holds its offset (the last one at the very end).
  std::size_t s = 0;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const std::int64_t begin = parameters[i].offset;
    const std::int64_t end = begin + numels[i];
    if (numels[i] == 0) {
      while (s + 1 < shards.size() && shards[s].end <= begin) ++s;
      shards[s].pieces.push_back(piece_of(parameters, i, 0, begin, begin));
      continue;
    }
    for (std::int64_t at = begin; at < end;) {
      while (shards[s].end <= at) ++s;
      const std::int64_t stop = std::min(end, shards[s].end);
      shards[s].pieces.push_back(piece_of(parameters, i, numels[i], at, stop));
      at = stop;
    }
  }
  return shards;
}

std::vector<std::string> describe_shards(const std::vector<Shard>& shards) {
  std::vector<std::string> lines;
  lines.reserve(shards.size());
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const Shard& shard = shards[i];
    const auto partial = std::count_if(shard.pieces.begin(), shard.pieces.end(),
                                       [](const ShardPiece& piece) { return !piece.whole(); });
    const std::string size = readable_bytes(static_cast<std::size_t>(shard.numel()) * 4);  // f32
    lines.push_back(fmt::format("server {}: elements [{}, {}), {} parameter(s){}, {}", i,
                                shard.begin, shard.end, shard.pieces.size(),
                                partial > 0 ? fmt::format(" ({} partial)", partial) : "", size));
  }
  return lines;
}

}  // namespace rig::engine::ps
