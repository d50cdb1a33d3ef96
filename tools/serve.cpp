// `shardrec serve MODEL_DIR --port P`: an HTTP/1.1 scoring server (cpp-httplib) over a quantized
// model directory, loaded once and read-only. Connections are handled by --threads workers; each
// parses and checks its request (engine/data/score_request.h) before queueing it, so a bad
// request is answered 400 without touching a batch. One scoring thread takes queued requests
// whole, up to --max-batch examples or until the oldest has waited --max-wait-ms, runs them as
// one batch through the model (whose forward is not reentrant: one thread) and hands each request
// its slice of the scores.
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "comm/mpi_env.h"
#include "comm/stop_signal.h"
#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/modules/model.h"
#include "engine/train/trainer.h"
#include "kernels/linear.h"
#include "tools/cli.h"
#include "tools/scoring.h"

#if SHARDREC_WITH_HTTPLIB
#include <httplib.h>
#endif

namespace shardrec::cli {
namespace fs = std::filesystem;

#if SHARDREC_WITH_HTTPLIB

namespace {

const char* const kServeUsage =
    "usage: shardrec serve MODEL_DIR --port P [--host H] [--threads T] [--max-batch N]\n"
    "                      [--max-wait-ms W] [--max-body-mb M] [--config CONFIG.yaml]\n"
    "\n"
    "Serves a quantized model directory (shardrec ckpt quantize) over HTTP/1.1:\n"
    "  POST /v1/score  "
    "{\"examples\":[{\"dense\":[...],\"sparse\":{\"f\":[ids]},\"weights\":{...}}]}\n"
    "                  -> {\"scores\":[...]}, one click probability per example, in order\n"
    "  GET /healthz    ok\n"
    "  GET /metrics    Prometheus text: requests, examples, batches, latency, errors by kind\n"
    "Bad input is answered 400 with {\"error\":{\"kind\",\"field\",\"example\",\"message\"}}.\n"
    "\n"
    "  --port P          the port (0: any free port; the port is logged)\n"
    "  --host H          the address to listen on (default 127.0.0.1)\n"
    "  --threads T       connection threads (default 8)\n"
    "  --max-batch N     examples scored together at most (default 256; a larger request is "
    "refused)\n"
    "  --max-wait-ms W   how long the oldest request waits for others to join (default 2)\n"
    "  --max-body-mb M   request bodies above M MiB are refused (default 16)\n"
    "  --config CONFIG   the model's config (default: the config.yaml of the model's run)\n"
    "SIGTERM or SIGINT: stop accepting, answer what is queued, exit 0.\n";

struct ServeArgs {
    std::string model_dir, config, host = "127.0.0.1";
    int64_t port = -1, threads = 8, max_batch = 256, max_wait_ms = 2, max_body_mb = 16;
};

ServeArgs parse_args(const std::vector<std::string>& args) {
    ServeArgs a;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        const std::map<std::string, int64_t*> ints = {{"--port", &a.port},
                                                      {"--threads", &a.threads},
                                                      {"--max-batch", &a.max_batch},
                                                      {"--max-wait-ms", &a.max_wait_ms},
                                                      {"--max-body-mb", &a.max_body_mb}};
        if (ints.count(arg) != 0 || arg == "--config" || arg == "--host") {
            if (i + 1 >= args.size())
                throw UsageError(fmt::format("{} needs a value", arg), kServeUsage);
            const std::string& v = args[++i];
            if (arg == "--config" || arg == "--host") {
                (arg == "--config" ? a.config : a.host) = v;
                continue;
            }
            char* end = nullptr;
            const long long n = std::strtoll(v.c_str(), &end, 10);
            const long long lo = arg == "--port" || arg == "--max-wait-ms" ? 0 : 1;
            if (v.empty() || *end != '\0' || n < lo || (arg == "--port" && n > 65535))
                throw UsageError(fmt::format("{} must be an integer >= {}{}, not '{}'", arg, lo,
                                             arg == "--port" ? " and <= 65535" : "", v),
                                 kServeUsage);
            *ints.at(arg) = n;
        } else if (!arg.empty() && arg[0] == '-') {
            throw UsageError(fmt::format("unknown option '{}'", arg), kServeUsage);
        } else if (a.model_dir.empty()) {
            a.model_dir = arg;
        } else {
            throw UsageError(fmt::format("unexpected argument '{}'", arg), kServeUsage);
        }
    }
    if (a.model_dir.empty())
        throw UsageError("serve needs a MODEL_DIR", kServeUsage);
    if (a.port < 0)
        throw UsageError("serve needs --port P (0: any free port)", kServeUsage);
    return a;
}

// Prometheus counters; the latency histogram's bounds in seconds.
constexpr std::array<double, 12> kLatencyBounds = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                                   0.05,   0.1,   0.2,   0.5,   1.0,  5.0};

class Metrics {
public:
    void request(int status, double seconds, int64_t examples) {
        std::lock_guard<std::mutex> lock(mu_);
        ++requests_[status];
        examples_ += examples;
        for (size_t i = 0; i < kLatencyBounds.size(); ++i)
            if (seconds <= kLatencyBounds[i])
                ++buckets_[i];
        ++count_;
        sum_ += seconds;
    }

    // A score request refused before the handler could time it (the HTTP layer's own answers).
    void refused(int status) {
        std::lock_guard<std::mutex> lock(mu_);
        ++requests_[status];
    }

    void error(const std::string& kind) {
        std::lock_guard<std::mutex> lock(mu_);
        ++errors_[kind];
    }

    void batch(int64_t examples) {
        std::lock_guard<std::mutex> lock(mu_);
        ++batches_;
        batch_examples_ += examples;
    }

    std::string text() const {
        std::lock_guard<std::mutex> lock(mu_);
        std::string t;
        t += "# HELP shardrec_serve_requests_total Score requests answered, by HTTP status.\n"
             "# TYPE shardrec_serve_requests_total counter\n";
        for (const auto& [code, n] : requests_)
            t += fmt::format("shardrec_serve_requests_total{{code=\"{}\"}} {}\n", code, n);
        t += "# HELP shardrec_serve_examples_total Examples scored.\n"
             "# TYPE shardrec_serve_examples_total counter\n";
        t += fmt::format("shardrec_serve_examples_total {}\n", examples_);
        t += "# HELP shardrec_serve_batches_total Batches run by the scoring thread.\n"
             "# TYPE shardrec_serve_batches_total counter\n";
        t += fmt::format("shardrec_serve_batches_total {}\n", batches_);
        t += "# HELP shardrec_serve_batch_examples_total Examples in those batches.\n"
             "# TYPE shardrec_serve_batch_examples_total counter\n";
        t += fmt::format("shardrec_serve_batch_examples_total {}\n", batch_examples_);
        t += "# HELP shardrec_serve_errors_total Refused requests, by kind.\n"
             "# TYPE shardrec_serve_errors_total counter\n";
        for (const auto& [kind, n] : errors_)
            t += fmt::format("shardrec_serve_errors_total{{kind=\"{}\"}} {}\n", kind, n);
        t += "# HELP shardrec_serve_request_seconds Score request latency, body read to answer.\n"
             "# TYPE shardrec_serve_request_seconds histogram\n";
        for (size_t i = 0; i < kLatencyBounds.size(); ++i)
            t += fmt::format("shardrec_serve_request_seconds_bucket{{le=\"{}\"}} {}\n",
                             kLatencyBounds[i], buckets_[i]);
        t += fmt::format("shardrec_serve_request_seconds_bucket{{le=\"+Inf\"}} {}\n", count_);
        t += fmt::format("shardrec_serve_request_seconds_sum {:.9g}\n", sum_);
        t += fmt::format("shardrec_serve_request_seconds_count {}\n", count_);
        return t;
    }

private:
    mutable std::mutex mu_;
    std::map<int, int64_t> requests_;
    std::map<std::string, int64_t> errors_;
    std::array<int64_t, kLatencyBounds.size()> buckets_{};
    int64_t count_ = 0, examples_ = 0, batches_ = 0, batch_examples_ = 0;
    double sum_ = 0;
};

// The dynamic batcher: requests in, one scoring thread, each request's scores out.
class Batcher {
public:
    Batcher(RecModel& model,
            train::ManagedCollisionTables& mc,
            data::ScoreSchema schema,
            Metrics& metrics,
            int64_t max_batch,
            int64_t max_wait_ms)
        : model_(model),
          mc_(mc),
          schema_(std::move(schema)),
          metrics_(metrics),
          max_batch_(max_batch),
          max_wait_(std::chrono::milliseconds(max_wait_ms)),
          thread_([this] { run(); }) {}

    Batcher(const Batcher&) = delete;
    Batcher& operator=(const Batcher&) = delete;
    Batcher(Batcher&&) = delete;
    Batcher& operator=(Batcher&&) = delete;

    ~Batcher() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            stopping_ = true;
        }
        work_.notify_one();
        thread_.join();
    }

    // Blocks until `request` (checked, at most max_batch examples) is scored. Returns false with
    // `error` when scoring failed.
    bool score(const data::ScoreRequest& request, std::vector<float>& scores, std::string& error) {
        Job job;
        job.request = &request;
        job.queued_at = std::chrono::steady_clock::now();
        std::unique_lock<std::mutex> lock(mu_);
        queue_.push_back(&job);
        queued_ += request.count;
        work_.notify_one();
        done_.wait(lock, [&] { return job.done; });
        scores = std::move(job.scores);
        error = std::move(job.error);
        return error.empty();
    }

private:
    struct Job {
        const data::ScoreRequest* request = nullptr;
        std::chrono::steady_clock::time_point queued_at;
        bool done = false;
        std::vector<float> scores;
        std::string error;
    };

    void run() {
        std::unique_lock<std::mutex> lock(mu_);
        while (true) {
            work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
            if (queue_.empty())
                return;  // stopping, nothing left
            // Wait for company until the batch is full or the oldest request's budget is spent.
            const auto deadline = queue_.front()->queued_at + max_wait_;
            while (queued_ < max_batch_ && !stopping_)
                if (work_.wait_until(lock, deadline) == std::cv_status::timeout)
                    break;
            std::vector<Job*> jobs;
            int64_t n = 0;
            while (!queue_.empty() &&
                   (jobs.empty() || n + queue_.front()->request->count <= max_batch_)) {
                jobs.push_back(queue_.front());
                n += queue_.front()->request->count;
                queued_ -= queue_.front()->request->count;
                queue_.pop_front();
            }
            lock.unlock();
            std::vector<const data::ScoreRequest*> parts;
            for (Job* j : jobs)
                parts.push_back(j->request);
            std::string error;
            std::vector<float> logits;
            try {
                Batch batch = examples_batch(parts, schema_);
                if (!mc_.empty())
                    batch = mc_.remap_eval(batch);
                const Tensor& out = model_.forward(batch, Stream::cpu());
                logits.assign(out.data<float>(), out.data<float>() + n);
            } catch (const std::exception& e) {
                error = e.what();
            }
            metrics_.batch(n);
            lock.lock();
            int64_t at = 0;
            for (Job* j : jobs) {
                if (error.empty())
                    for (int64_t b = 0; b < j->request->count; ++b)
                        j->scores.push_back(score_of(logits[static_cast<size_t>(at + b)]));
                j->error = error;
                at += j->request->count;
                j->done = true;
            }
            done_.notify_all();
        }
    }

    RecModel& model_;
    train::ManagedCollisionTables& mc_;  // used by the scoring thread only
    const data::ScoreSchema schema_;
    Metrics& metrics_;
    const int64_t max_batch_;
    const std::chrono::milliseconds max_wait_;
    std::mutex mu_;
    std::condition_variable work_, done_;
    std::deque<Job*> queue_;
    int64_t queued_ = 0;
    bool stopping_ = false;
    std::thread thread_;  // last: starts once the rest is built
};

std::string scores_json(const std::vector<float>& scores) {
    std::string t = "{\"scores\":[";
    for (size_t i = 0; i < scores.size(); ++i) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%s%.9g", i == 0 ? "" : ",", scores[i]);
        t += buf;
    }
    return t + "]}\n";
}

}  // namespace

int serve_main(const std::vector<std::string>& args) {
    for (const std::string& arg : args) {
        if (arg == "--help" || arg == "-h") {
            std::fputs(kServeUsage, stdout);
            return 0;
        }
    }
    const ServeArgs a = parse_args(args);
    kernels::set_row_invariant_gemms(true);  // a score whatever its batch and threads
    SR_CHECK(comm::process_info().world_size == 1,
             "serve runs as one process (it was started on {} ranks); run it without mpirun",
             comm::process_info().world_size);
    SR_CHECK(fs::is_directory(a.model_dir), "model directory '{}' does not exist", a.model_dir);
    const train::QuantizedModel model = train::read_quantized_model(a.model_dir);
    Config config = load_config(model_config_path(a.config, model), {});
    if (std::getenv("SHARDREC_LOG_LEVEL") == nullptr)
        log::set_level(config.runtime.log_level);
    SR_CHECK(config.model.type == model.model_type,
             "quantized model {} is a '{}' model, the config's is '{}'", a.model_dir,
             model.model_type, config.model.type);
    const int threads = train::configure_threads(config);
    const std::unique_ptr<RecModel> rec =
        make_model(config.model, static_cast<uint64_t>(config.train.seed),
                   std::make_unique<QuantEmbeddingBagCollection>(quant_tables(config, model),
                                                                 is_weighted(config.model)));
    train::load_quantized_dense(rec->parameters(), model);
    train::ManagedCollisionTables mc(config.model, static_cast<uint64_t>(config.train.seed));
    train::load_quantized_remap(mc, model);
    data::ScoreSchema schema = score_schema(config);
    schema.max_examples = a.max_batch;

    Metrics metrics;
    Batcher batcher(*rec, mc, schema, metrics, a.max_batch, a.max_wait_ms);
    httplib::Server server;
    const auto pool_size = static_cast<size_t>(a.threads);
    server.new_task_queue = [pool_size] { return new httplib::ThreadPool(pool_size); };
    // Headers and body go out as separate writes: without TCP_NODELAY, Nagle holds the body
    // until the client's delayed ACK (40 ms a request on Linux).
    server.set_tcp_nodelay(true);
    server.set_payload_max_length(static_cast<size_t>(a.max_body_mb) << 20);
    // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a second server on the
    // same port starts and the kernel shares the connections between the two.
    server.set_socket_options([](socket_t sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    const auto refuse = [&](httplib::Response& res, const data::ScoreError& e) {
        metrics.error(e.kind);
        res.status = 400;
        res.set_content(data::score_error_json(e) + "\n", "application/json");
    };
    const data::ScoreError too_large{
        "body_too_large", "", -1,
        fmt::format("the request body is larger than --max-body-mb {} MiB", a.max_body_mb)};
    // The body through a content reader: the JSON is read whatever the Content-Type says (curl
    // -d sends a form type, whose bodies httplib would otherwise cap at 8 KiB), up to the limit.
    server.Post("/v1/score", [&](const httplib::Request& req, httplib::Response& res,
                                 const httplib::ContentReader& read) {
        const auto start = std::chrono::steady_clock::now();
        data::ScoreRequest request;
        data::ScoreError error;
        std::vector<float> scores;
        std::string failure, body;
        if (req.is_multipart_form_data()) {
            refuse(res, {"malformed_json", "", -1,
                         "the body is multipart form data; send the JSON itself "
                         "(Content-Type: application/json)"});
        } else if (!read([&](const char* data, size_t n) {
                       body.append(data, n);
                       return true;
                   })) {
            refuse(res, res.status == 413
                            ? too_large
                            : data::ScoreError{"bad_request", "", -1,
                                               "the request body ended before its length"});
        } else if (!data::parse_score_request(body, schema, request, error)) {
            refuse(res, error);
        } else if (request.count == 0 || batcher.score(request, scores, failure)) {
            res.set_content(scores_json(scores), "application/json");
        } else {
            log::root().error("serve: scoring a batch failed: {}", failure);
            metrics.error("internal");
            res.status = 500;
            res.set_content(
                data::score_error_json({"internal", "", -1, "scoring failed: " + failure}) + "\n",
                "application/json");
        }
        const int status = res.status == -1 ? 200 : res.status;  // httplib sets 200 later
        metrics.request(
            status, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
            status == 200 ? request.count : 0);
    });
    server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
        res.set_content("ok\n", "text/plain");
    });
    server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
        res.set_content(metrics.text(), "text/plain; version=0.0.4");
    });
    // httplib's own refusals (413 past the body limit, 404, ...) get the same JSON error shape;
    // an oversized body is bad input like any other: 400.
    const httplib::Server::HandlerWithResponse on_error = [&](const httplib::Request& req,
                                                              httplib::Response& res) {
        if (!res.body.empty())  // a handler's own 400 or 500, already counted
            return httplib::Server::HandlerResponse::Unhandled;
        data::ScoreError e{"not_found", "", -1,
                           fmt::format("no such endpoint: {} {}", req.method, req.path)};
        // An endpoint asked with the other method: 405, naming the one it takes.
        const std::map<std::string, std::string> methods = {
            {"/v1/score", "POST"}, {"/healthz", "GET"}, {"/metrics", "GET"}};
        const auto endpoint = methods.find(req.path);
        if (endpoint != methods.end() && endpoint->second != req.method) {
            res.status = 405;
            res.set_header("Allow", endpoint->second);
            e = {"method_not_allowed", "", -1,
                 fmt::format("{} {}: the endpoint takes {}", req.method, req.path,
                             endpoint->second)};
        } else if (res.status == 413) {
            e = too_large;
            res.status = 400;
        } else if (res.status != 404) {
            e = {"bad_request", "", -1,
                 fmt::format("HTTP {} for {} {} (the request line, headers or length)", res.status,
                             req.method, req.path)};
        }
        if (req.path == "/v1/score")
            metrics.refused(res.status);
        metrics.error(e.kind);
        res.set_content(data::score_error_json(e) + "\n", "application/json");
        return httplib::Server::HandlerResponse::Handled;
    };
    server.set_error_handler(on_error);

    int port = static_cast<int>(a.port);
    if (port == 0)
        port = server.bind_to_any_port(a.host);
    else if (!server.bind_to_port(a.host, port))
        port = -1;
    SR_CHECK(port > 0, "serve: cannot listen on {}:{} (in use, or not an address of this host)",
             a.host, a.port);
    // SIGTERM/SIGINT set a flag (comm/stop_signal.h); this thread turns it into a clean stop.
    comm::install_stop_signal_handlers();
    std::atomic<bool> done{false};
    std::thread watcher([&] {
        while (!done.load() && comm::stop_signal_received() == 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        server.stop();
    });
    log::root().info(
        "serve: model {} ({} tables, {:.2f} MB), {} features, {} dense; listening on {}:{} with "
        "{} connection threads, 1 scoring thread ({} kernel threads), batches of up to {} examples "
        "or {} ms",
        a.model_dir, model.tables.size(), static_cast<double>(model.table_bytes()) / 1e6,
        schema.features.size(), schema.num_dense, a.host, port, a.threads, threads, a.max_batch,
        a.max_wait_ms);
    fmt::print("{{\"kind\":\"serve\",\"host\":\"{}\",\"port\":{}}}\n", a.host, port);
    std::fflush(stdout);
    const bool ok = server.listen_after_bind();
    done = true;
    watcher.join();
    const int sig = comm::stop_signal_received();
    SR_CHECK(ok || sig != 0, "serve: the server on {}:{} stopped unexpectedly", a.host, port);
    log::root().info("serve: stopped by signal {}; {}", sig, "every queued request was answered");
    return 0;
}

#else

int serve_main(const std::vector<std::string>& /*args*/) {
    SR_CHECK(false,
             "this shardrec was built without cpp-httplib, which `serve` needs: install "
             "libcpp-httplib-dev (scripts/setup.sh) and build again");
    return 1;
}

#endif

}  // namespace shardrec::cli
