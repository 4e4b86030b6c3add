#include "core/errors.h"

#include <sstream>

namespace cyb {

const char* error_kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::Format: return "FormatError";
    case ErrorKind::UnsupportedOp: return "UnsupportedOp";
    case ErrorKind::ShapeMismatch: return "ShapeMismatch";
    case ErrorKind::MissingTensor: return "MissingTensor";
    case ErrorKind::WeightFormatMismatch: return "WeightFormatMismatch";
    case ErrorKind::OutOfMemory: return "OutOfMemory";
    case ErrorKind::BackendInit: return "BackendInit";
    case ErrorKind::InvalidConfig: return "InvalidConfig";
    case ErrorKind::Tokenizer: return "Tokenizer";
  }
  return "Error";
}

std::string shape_str(const std::vector<int64_t>& s) {
  // No iostreams: a module whose libstdc++ locale state is not initialised (seen on the
  // H200 device image, GCC 13) crashes inside ostream's number formatting.
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

void throw_format(const std::string& section, const std::string& key, const std::string& reason) {
  std::string where = section.empty() ? "file" : "section '" + section + "'";
  if (!key.empty()) where += ", key '" + key + "'";
  throw Error(ErrorKind::Format, "malformed .model (" + where + "): " + reason,
              {{"section", section}, {"key", key}, {"reason", reason}});
}

void throw_unsupported_op(const std::string& op, const std::string& backend,
                          const std::string& input_dtype) {
  throw Error(ErrorKind::UnsupportedOp,
              "op '" + op + "' is not supported by backend '" + backend + "' for input dtype " +
                  input_dtype,
              {{"op", op}, {"backend", backend}, {"input_dtype", input_dtype}});
}

void throw_shape_mismatch(const std::string& op, const std::vector<int64_t>& expected,
                          const std::vector<int64_t>& got) {
  throw Error(ErrorKind::ShapeMismatch,
              "shape mismatch in '" + op + "': expected " + shape_str(expected) + ", got " +
                  shape_str(got),
              {{"op", op}, {"expected", shape_str(expected)}, {"got", shape_str(got)}});
}

void throw_missing_tensor(const std::string& name, const std::string& required_by) {
  throw Error(ErrorKind::MissingTensor,
              "missing tensor '" + name + "' (required by " + required_by + ")",
              {{"name", name}, {"required_by", required_by}});
}

void throw_weight_format(const std::string& name, const std::string& declared,
                         uint64_t actual_bytes, const std::string& reason) {
  std::string msg = "tensor '" + name + "' declared as " + declared + " but has " +
                    std::to_string(actual_bytes) + " bytes";
  if (!reason.empty()) msg += ": " + reason;
  throw Error(ErrorKind::WeightFormatMismatch, msg,
              {{"name", name}, {"declared", declared}, {"actual_bytes", std::to_string(actual_bytes)}});
}

void throw_oom(const std::string& backend, uint64_t requested_bytes) {
  throw Error(ErrorKind::OutOfMemory,
              "backend '" + backend + "' is out of memory (requested " +
                  std::to_string(requested_bytes) + " bytes)",
              {{"backend", backend}, {"requested_bytes", std::to_string(requested_bytes)}});
}

void throw_backend_init(const std::string& backend, const std::string& reason) {
  throw Error(ErrorKind::BackendInit, "backend '" + backend + "' failed to start: " + reason,
              {{"backend", backend}, {"reason", reason}});
}

void throw_invalid_config(const std::string& field, const std::string& reason) {
  throw Error(ErrorKind::InvalidConfig, "invalid config '" + field + "': " + reason,
              {{"field", field}, {"reason", reason}});
}

void throw_tokenizer(const std::string& reason) {
  throw Error(ErrorKind::Tokenizer, "tokenizer error: " + reason, {{"reason", reason}});
}

}  // namespace cyb
