#include "kv/session.h"

#include "util/atomic_file.h"
#include "util/error.h"

namespace larql {

Session::Session(std::shared_ptr<Forward> fwd, std::shared_ptr<const Tokenizer> tok, const EngineSpec& spec,
                 const SessionOptions& opt)
    : fwd_(std::move(fwd)), tok_(std::move(tok)), opt_(opt) {
  if (!fwd_ || !tok_) throw Error(ErrorKind::InvalidArgument, "session: no forward pass or no tokenizer");
  const int64_t model_ctx = fwd_->config().context_length;
  if (opt.context < 0 || opt.context > model_ctx)
    throw Error(ErrorKind::InvalidArgument, "session: context " + std::to_string(opt.context) + " is outside [1, " +
                                                std::to_string(model_ctx) + "] (the model's context; 0 = all of it)");
  context_ = opt.context > 0 ? opt.context : model_ctx;
  engine_ = make_engine(spec, fwd_);
  if (!opt_.save_state.empty()) check_output_path(opt_.save_state, opt_.save_state_name);
  if (!opt_.resume.empty()) engine_->load_state(opt_.resume);  // refuses another model's or engine's file
  fresh_ = opt_.resume.empty();
}

std::vector<int32_t> Session::encode(const std::string& text, std::vector<std::string>* notes) const {
  return encode_prompt(*tok_, text, starts_sequence() && tok_->add_bos(), notes);
}

void Session::check_prompt(const std::vector<int32_t>& ids) const {
  if (!fresh_) return;
  if (ids.empty()) throw Error(ErrorKind::EmptyPrompt, "the prompt has no tokens");
  if (static_cast<int64_t>(ids.size()) > context_)
    throw Error(ErrorKind::ContextOverflow, "the prompt is " + std::to_string(ids.size()) +
                                                " tokens, longer than the context of " + std::to_string(context_) +
                                                " tokens");
}

GenerateResult Session::generate(const std::vector<int32_t>& ids, GenerateOptions opt,
                                 const std::function<void(std::string_view)>& on_text) {
  check_prompt(ids);
  opt.continue_sequence = !fresh_;
  opt.context_limit = context_;
  GenerateResult r = larql::generate(*engine_, *fwd_, *tok_, ids, opt, on_text);
  fresh_ = false;
  if (!opt_.save_state.empty()) engine_->save_state(opt_.save_state);
  return r;
}

}  // namespace larql
