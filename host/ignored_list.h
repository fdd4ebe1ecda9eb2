// The list of accepted but unused parts of a model that the loaders and from_mujoco report in
// Model::ignored.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

namespace phx {

// Accepted but unused elements and attributes, one entry per kind with its first location and
// its count, in the order first seen.
class IgnoredList {
 public:
  // count more of `what`, first seen at `where`
  void add(const std::string& what, const std::string& where, long count = 1) {
    if (count <= 0) return;
    auto [it, inserted] = index_.try_emplace(what, entries_.size());
    if (inserted) entries_.push_back({what, where, 0});
    entries_[it->second].count += count;
  }
  // "what (where), n times" per entry, for Model::ignored
  std::vector<std::string> list() const {
    std::vector<std::string> out;
    for (const Entry& e : entries_) {
      out.push_back(e.what + " (" + e.where + "), " + std::to_string(e.count) +
                    (e.count == 1 ? " time" : " times"));
    }
    return out;
  }

 private:
  struct Entry {
    std::string what, where;
    long count;
  };
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace phx
