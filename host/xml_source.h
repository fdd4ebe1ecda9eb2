// The URDF loader's parsed XML file (host/urdf.cpp; MJCF is read by MuJoCo's compiler): a
// parsed file that names the line of each of its nodes in messages, and the list of accepted but
// unused elements reported in Model::ignored.
#pragma once

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <pugixml.hpp>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "host/ignored_list.h"

namespace phx {

// a parsed XML file; `doc` holds its nodes
struct XmlSource {
  std::string path;                    // as named in messages
  std::string dir;                     // directory that relative references start from
  std::vector<ptrdiff_t> line_starts;  // offset of each line's first character
  pugi::xml_document doc;

  // Parses text. Malformed XML throws std::runtime_error "path:line: malformed XML: ...",
  // followed by `context` when given.
  void parse(const std::string& text, const std::string& context = "") {
    line_starts.assign(1, 0);
    for (size_t i = 0; i < text.size(); i++) {
      if (text[i] == '\n') line_starts.push_back(static_cast<ptrdiff_t>(i + 1));
    }
    pugi::xml_parse_result result = doc.load_buffer(text.data(), text.size());
    if (!result) {
      throw std::runtime_error(path + ":" + std::to_string(line(result.offset)) +
                               ": malformed XML: " + result.description() + context);
    }
  }

  // the line (from 1) of a character offset
  long line(ptrdiff_t offset) const {
    return std::upper_bound(line_starts.begin(), line_starts.end(), offset) - line_starts.begin();
  }

  // "path:line" of a node (the path alone for a node without an offset); the file's base name
  // only when `basename` is set
  std::string where(pugi::xml_node node, bool basename = false) const {
    std::string file = basename ? std::filesystem::path(path).filename().string() : path;
    ptrdiff_t offset = node.offset_debug();
    if (offset < 0) return file;
    return file + ":" + std::to_string(line(offset));
  }
};

}  // namespace phx
