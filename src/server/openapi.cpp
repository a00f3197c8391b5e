#include "server/openapi.h"

#include <nlohmann/json.hpp>

namespace clef::server {

namespace {

// Written as JSON text (easier to review against protocol.md than builder code); parsed once per
// call so a typo fails loudly in the tests rather than producing a broken document.
constexpr const char* kDocument = R"json({
  "openapi": "3.1.0",
  "info": {
    "title": "clefserve",
    "summary": "System One decisions from Cloudflare's Clef models",
    "description": "One forward pass answers every question of a request. Errors follow FastAPI: 422 bodies carry {\"detail\": [{\"loc\", \"msg\", \"type\"}]}, other errors {\"detail\": \"...\"}.",
    "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
    "version": "0"
  },
  "paths": {
    "/v1/systemone": {
      "post": {
        "operationId": "systemone",
        "summary": "Answer a System One request",
        "parameters": [{"$ref": "#/components/parameters/RequestId"}],
        "requestBody": {
          "required": true,
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SystemOneRequest"}}}
        },
        "responses": {
          "200": {
            "description": "The answers, in request question order.",
            "headers": {
              "X-Request-Id": {"$ref": "#/components/headers/RequestId"},
              "Server-Timing": {
                "description": "W3C Server-Timing, ms: read (body received), encode, queue, forward (the batch's engine pass), answer, total (headers parsed to response written). Also on refusals, with the phases reached.",
                "schema": {"type": "string"}
              },
              "X-Clef-State-Truncated": {
                "description": "State tokens cut (only with truncation \"allow\" when the state did not fit).",
                "schema": {"type": "integer", "minimum": 1}
              }
            },
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SystemOneResponse"}}}
          },
          "400": {"$ref": "#/components/responses/Error", "description": "Malformed JSON, a body that is not an object, or broken HTTP framing (bad Content-Length, Transfer-Encoding not ending in chunked); the connection is closed."},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "404": {"$ref": "#/components/responses/Error", "description": "The model field names a model that is not served (--served-model-name)."},
          "408": {"$ref": "#/components/responses/Error", "description": "The header (--header-timeout) or the body (--body-timeout) did not arrive in time; the connection is closed."},
          "411": {"$ref": "#/components/responses/Error", "description": "Neither Content-Length nor Transfer-Encoding: chunked."},
          "413": {"$ref": "#/components/responses/Error", "description": "The body is over --max-body-bytes (counted as it arrives, chunked included)."},
          "415": {"$ref": "#/components/responses/Error", "description": "Content-Type is not application/json (or application/*+json), or a Content-Encoding other than identity."},
          "422": {"$ref": "#/components/responses/ValidationError"},
          "429": {"$ref": "#/components/responses/QueueFull"},
          "431": {"$ref": "#/components/responses/Error", "description": "The request line and header fields are over --max-header-bytes."},
          "500": {"$ref": "#/components/responses/Error"},
          "501": {"$ref": "#/components/responses/Error", "description": "A Transfer-Encoding other than chunked."},
          "503": {"$ref": "#/components/responses/Unavailable"}
        }
      }
    },
    "/health": {
      "get": {
        "operationId": "health",
        "summary": "Readiness and what is being served (no key required)",
        "security": [],
        "responses": {
          "200": {"description": "Ready: loaded and warmed up (connections are accepted only from then on).", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Health"}}}},
          "400": {"$ref": "#/components/responses/Error", "description": "Broken HTTP framing; the connection is closed."},
          "408": {"$ref": "#/components/responses/Error", "description": "The header did not arrive in time (--header-timeout)."},
          "431": {"$ref": "#/components/responses/Error", "description": "The request line and header fields are over --max-header-bytes."},
          "503": {"$ref": "#/components/responses/Unavailable", "description": "Not ready: a drain began (SIGTERM/SIGINT; during --drain-delay requests are still answered), body {\"status\":\"draining\",\"detail\":...}; or over --max-connections."}
        }
      }
    },
    "/health/live": {
      "get": {
        "operationId": "live",
        "summary": "Liveness: the process answers, also while it drains (no key required)",
        "security": [],
        "responses": {
          "200": {"description": "The event loop answers: status ok, or draining once a drain began.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Live"}}}},
          "400": {"$ref": "#/components/responses/Error", "description": "Broken HTTP framing; the connection is closed."},
          "408": {"$ref": "#/components/responses/Error", "description": "The header did not arrive in time (--header-timeout)."},
          "431": {"$ref": "#/components/responses/Error", "description": "The request line and header fields are over --max-header-bytes."},
          "503": {"$ref": "#/components/responses/Unavailable", "description": "Over --max-connections."}
        }
      }
    },
    "/v1/models": {
      "get": {
        "operationId": "listModels",
        "summary": "The served model names (OpenAI-style list)",
        "responses": {
          "200": {"description": "Served models.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ModelList"}}}},
          "400": {"$ref": "#/components/responses/Error", "description": "Broken HTTP framing; the connection is closed."},
          "408": {"$ref": "#/components/responses/Error", "description": "The header did not arrive in time (--header-timeout)."},
          "431": {"$ref": "#/components/responses/Error", "description": "The request line and header fields are over --max-header-bytes."},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "503": {"$ref": "#/components/responses/Unavailable", "description": "Over --max-connections."}
        }
      }
    },
    "/metrics": {
      "get": {
        "operationId": "metrics",
        "summary": "Prometheus metrics (text exposition format 0.0.4)",
        "responses": {
          "200": {"description": "Metrics.", "content": {"text/plain": {"schema": {"type": "string"}}}},
          "400": {"$ref": "#/components/responses/Error", "description": "Broken HTTP framing; the connection is closed."},
          "408": {"$ref": "#/components/responses/Error", "description": "The header did not arrive in time (--header-timeout)."},
          "431": {"$ref": "#/components/responses/Error", "description": "The request line and header fields are over --max-header-bytes."},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "503": {"$ref": "#/components/responses/Unavailable", "description": "Over --max-connections."}
        }
      }
    },
    "/openapi.json": {
      "get": {
        "operationId": "openapi",
        "summary": "This document",
        "responses": {
          "200": {"description": "OpenAPI 3.1 document.", "content": {"application/json": {"schema": {"type": "object"}}}},
          "400": {"$ref": "#/components/responses/Error", "description": "Broken HTTP framing; the connection is closed."},
          "408": {"$ref": "#/components/responses/Error", "description": "The header did not arrive in time (--header-timeout)."},
          "431": {"$ref": "#/components/responses/Error", "description": "The request line and header fields are over --max-header-bytes."},
          "401": {"$ref": "#/components/responses/Unauthorized"},
          "503": {"$ref": "#/components/responses/Unavailable", "description": "Over --max-connections."}
        }
      }
    },
    "/": {
      "get": {
        "operationId": "playground",
        "summary": "The playground page (HTML; its script, style sheet and icon are under /ui/). No key required; off with --no-ui",
        "security": [],
        "responses": {
          "200": {"description": "The page, with a strict Content-Security-Policy (everything from this origin only) and Cache-Control: no-cache.", "content": {"text/html": {"schema": {"type": "string"}}}},
          "400": {"$ref": "#/components/responses/Error", "description": "Broken HTTP framing; the connection is closed."},
          "404": {"$ref": "#/components/responses/Error", "description": "The server runs with --no-ui."},
          "408": {"$ref": "#/components/responses/Error", "description": "The header did not arrive in time (--header-timeout)."},
          "431": {"$ref": "#/components/responses/Error", "description": "The request line and header fields are over --max-header-bytes."},
          "503": {"$ref": "#/components/responses/Unavailable", "description": "Over --max-connections."}
        }
      }
    },
    "/ui/{asset}": {
      "get": {
        "operationId": "playgroundAsset",
        "summary": "The playground's script, style sheet and icon. No key required; off with --no-ui",
        "security": [],
        "parameters": [{"name": "asset", "in": "path", "required": true, "schema": {"type": "string", "enum": ["app.js", "style.css", "icon.svg"]}}],
        "responses": {
          "200": {"description": "The file (text/javascript, text/css or image/svg+xml). Asked for with ?v=<its hash>, as the page links it: Cache-Control: public, max-age=31536000, immutable; otherwise no-cache.", "content": {"text/javascript": {"schema": {"type": "string"}}, "text/css": {"schema": {"type": "string"}}, "image/svg+xml": {"schema": {"type": "string"}}}},
          "400": {"$ref": "#/components/responses/Error", "description": "Broken HTTP framing; the connection is closed."},
          "404": {"$ref": "#/components/responses/Error", "description": "Another name, or the server runs with --no-ui."},
          "408": {"$ref": "#/components/responses/Error", "description": "The header did not arrive in time (--header-timeout)."},
          "431": {"$ref": "#/components/responses/Error", "description": "The request line and header fields are over --max-header-bytes."},
          "503": {"$ref": "#/components/responses/Unavailable", "description": "Over --max-connections."}
        }
      }
    }
  },
  "components": {
    "parameters": {
      "RequestId": {
        "name": "X-Request-Id", "in": "header", "required": false,
        "description": "Echoed back; a fresh id is made when absent.",
        "schema": {"type": "string", "maxLength": 128}
      }
    },
    "headers": {
      "RequestId": {"description": "The request id (the client's, or a fresh one).", "schema": {"type": "string"}}
    },
    "responses": {
      "Error": {
        "description": "An error with a human-readable detail.",
        "headers": {"X-Request-Id": {"$ref": "#/components/headers/RequestId"}},
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorDetail"}}}
      },
      "Unauthorized": {
        "description": "The bearer key is missing or wrong (--api-key); checked before any body byte is read.",
        "headers": {
          "WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}},
          "X-Request-Id": {"$ref": "#/components/headers/RequestId"}
        },
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorDetail"}}}
      },
      "Unavailable": {
        "description": "Over --max-connections (with Retry-After and Connection: close), or shutting down.",
        "headers": {
          "Retry-After": {"description": "Seconds to wait (connection cap only).", "schema": {"type": "integer"}},
          "X-Request-Id": {"$ref": "#/components/headers/RequestId"}
        },
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorDetail"}}}
      },
      "QueueFull": {
        "description": "The request queue is full; retry later.",
        "headers": {
          "Retry-After": {"description": "Seconds to wait.", "schema": {"type": "integer"}},
          "X-Request-Id": {"$ref": "#/components/headers/RequestId"}
        },
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorDetail"}}}
      },
      "ValidationError": {
        "description": "The request failed validation (field path in loc).",
        "headers": {"X-Request-Id": {"$ref": "#/components/headers/RequestId"}},
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}}
      }
    },
    "securitySchemes": {
      "bearer": {"type": "http", "scheme": "bearer", "description": "--api-key / CLEF_API_KEY"}
    },
    "schemas": {
      "SystemOneRequest": {
        "type": "object",
        "required": ["model", "state", "questions"],
        "properties": {
          "model": {"type": "string", "description": "Echoed back."},
          "state": {"description": "Any JSON: a string is used raw, anything else as compact sorted JSON."},
          "questions": {
            "type": "object", "minProperties": 1, "maxProperties": 64,
            "additionalProperties": {"$ref": "#/components/schemas/Question"},
            "description": "Question id -> question; order matters."
          },
          "truncation": {"type": "string", "enum": ["error", "allow"], "default": "error"},
          "thinking": {
            "type": "object",
            "properties": {"enabled": {"type": "boolean", "const": false}}
          },
          "images": {
            "type": ["array", "null"], "maxItems": 8,
            "items": {"type": "string", "minLength": 1, "description": "data:image/{png,jpeg,jpg,webp};base64,... or raw base64 of a PNG, JPEG or WebP file; URLs are refused (never fetched)."},
            "description": "Images, in the prompt before any video (--max-images; decoded width x height at most --max-image-pixels). 422 not_supported when the engine has no vision tower (the CUDA engine today)."
          },
          "videos": {
            "type": ["array", "null"], "maxItems": 2,
            "items": {
              "oneOf": [
                {
                  "type": "object",
                  "required": ["frames"],
                  "additionalProperties": false,
                  "properties": {
                    "frames": {"type": "array", "minItems": 2, "maxItems": 768, "items": {"type": "string", "minLength": 1}, "description": "The video's frames as image strings (same forms as images), one size for all (--max-video-frames)."},
                    "fps": {"type": ["number", "null"], "exclusiveMinimum": 0, "description": "Source frames per second (default 24)."}
                  }
                },
                {
                  "type": "object",
                  "required": ["data"],
                  "additionalProperties": false,
                  "properties": {
                    "data": {"type": "string", "minLength": 1, "description": "A video file: data:video/{mp4,webm,x-matroska,quicktime};base64,... or raw base64 of an MP4/MOV or Matroska/WebM file. Decoded with FFmpeg in memory; its stream's average frame rate is the fps. Limits checked before decoding: --max-image-pixels per frame, --max-video-frames, --max-video-seconds. Lossy codecs decode to FFmpeg's RGB (swscale, stream's tagged matrix/range, untagged BT.601 limited), not bit-identical to other decoders."}
                  }
                }
              ]
            },
            "description": "Videos, as decoded frames or as a file (--max-videos). 422 with the reason for a corrupt, truncated, one-frame or over-limit file, an unsupported container or codec."
          },
          "media_kwargs": {
            "type": ["object", "null"],
            "additionalProperties": false,
            "properties": {
              "fps": {"type": ["number", "null"], "exclusiveMinimum": 0, "description": "Target sampling rate (default 2); null together with num_frames."},
              "num_frames": {"type": "integer", "minimum": 2, "maximum": 768, "description": "Frames to sample per video; only with fps: null."},
              "min_pixels": {"type": "integer", "minimum": 1, "description": "Image pixel budget; only together with max_pixels."},
              "max_pixels": {"type": "integer", "minimum": 1, "description": "Image pixel budget; only together with min_pixels."}
            },
            "description": "The processor's sampling and sizing options (docs/spec/media.md); any other key is 422."
          }
        }
      },
      "Question": {
        "type": "object",
        "required": ["type"],
        "properties": {
          "type": {"type": "string", "enum": ["noul", "choice", "score"]},
          "instructions": {"description": "Any JSON."},
          "criteria": {
            "description": "choice: non-empty object option -> description; score: non-empty array of level descriptions; noul: optional object with true/false.",
            "oneOf": [
              {"type": "object", "minProperties": 1},
              {"type": "array", "minItems": 1},
              {"type": "null"}
            ]
          }
        }
      },
      "SystemOneResponse": {
        "type": "object",
        "required": ["model", "answers", "usage"],
        "properties": {
          "model": {"type": "string"},
          "answers": {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/Answer"}},
          "usage": {"$ref": "#/components/schemas/Usage"}
        }
      },
      "Usage": {
        "type": "object",
        "required": ["input_tokens", "output_tokens"],
        "properties": {
          "input_tokens": {"type": "integer"},
          "output_tokens": {"type": "integer", "const": 0},
          "truncated_state_tokens": {"type": "integer", "minimum": 1}
        }
      },
      "Answer": {
        "oneOf": [
          {"$ref": "#/components/schemas/NoulAnswer"},
          {"$ref": "#/components/schemas/ChoiceAnswer"},
          {"$ref": "#/components/schemas/ScoreAnswer"}
        ],
        "discriminator": {"propertyName": "type"}
      },
      "NoulAnswer": {
        "type": "object",
        "required": ["type", "noul"],
        "properties": {"type": {"const": "noul"}, "noul": {"type": "number"}}
      },
      "ChoiceAnswer": {
        "type": "object",
        "required": ["type", "choice", "confidence", "probabilities"],
        "properties": {
          "type": {"const": "choice"},
          "choice": {"type": "string"},
          "confidence": {"type": "number"},
          "probabilities": {"type": "object", "additionalProperties": {"type": "number"}}
        }
      },
      "ScoreAnswer": {
        "type": "object",
        "required": ["type", "score", "confidence", "legend", "probabilities"],
        "properties": {
          "type": {"const": "score"},
          "score": {"type": "number"},
          "confidence": {"type": "number"},
          "legend": {"type": "object"},
          "probabilities": {"type": "object", "additionalProperties": {"type": "number"}}
        }
      },
      "ValidationError": {
        "type": "object",
        "required": ["loc", "msg", "type"],
        "properties": {
          "loc": {"type": "array", "items": {"type": ["string", "integer"]}},
          "msg": {"type": "string"},
          "type": {"type": "string"}
        }
      },
      "HTTPValidationError": {
        "type": "object",
        "required": ["detail"],
        "properties": {"detail": {"type": "array", "items": {"$ref": "#/components/schemas/ValidationError"}}}
      },
      "ErrorDetail": {
        "type": "object",
        "required": ["detail"],
        "properties": {"detail": {"type": "string"}}
      },
      "Health": {
        "type": "object",
        "required": ["status", "model", "backend", "device", "dtype", "quantization", "kernels",
                     "devices", "model_revision", "weights_sha256_verified", "max_length",
                     "version", "demo"],
        "properties": {
          "status": {"type": "string", "const": "ok"},
          "model": {"type": "string"},
          "backend": {"type": "string", "enum": ["cpu", "cuda"]},
          "device": {"type": "string"},
          "dtype": {"type": "string"},
          "quantization": {"type": "string", "enum": ["none", "fp8-e4m3-block128"],
                           "description": "The release's weights: fp8-e4m3-block128 = HF fine-grained FP8 (docs/engine.md \"FP8\")."},
          "kernels": {"type": "object", "additionalProperties": {"type": "string"}},
          "devices": {
            "type": "array",
            "description": "Every engine the one queue feeds, one per device of --device (cuda:0,cuda:1,... or cuda:all); the top-level backend, device, dtype, kernels and gpu describe the first. With a CUDA engine also prepare_s and tuning_cache.",
            "items": {
              "type": "object",
              "required": ["id", "backend", "device", "dtype", "kernels"],
              "properties": {
                "id": {"type": "string", "description": "cpu or cuda:N, the device label of the per-engine /metrics series."},
                "backend": {"type": "string", "enum": ["cpu", "cuda"]},
                "device": {"type": "string"},
                "dtype": {"type": "string"},
                "kernels": {"type": "object", "additionalProperties": {"type": "string"}},
                "prepare_s": {"type": "number"},
                "tuning_cache": {"type": "string"}
              }
            }
          },
          "model_revision": {"type": "string"},
          "weights_sha256_verified": {"type": "boolean"},
          "max_length": {"type": "integer"},
          "version": {"type": "string"},
          "demo": {"type": "boolean", "description": "true: the built-in demo model (random weights)."},
          "gpu": {
            "type": "object",
            "description": "CUDA backend only: the software stack.",
            "properties": {
              "name": {"type": "string"}, "driver_version": {"type": "string"},
              "cuda_driver_api": {"type": "string"}, "cuda_runtime": {"type": "string"},
              "cublaslt": {"type": "string"}
            }
          },
          "startup": {
            "type": "object",
            "description": "Seconds spent before serving: load_s, warm_up_s; with a CUDA engine also prepare_s, gemm_tuning_s, graphs_s, graphs, head_s, buckets, max_bucket_tokens, gemm_shapes, gemm_shapes_from_cache, tuning_cache (missing | hit | partial | stale | corrupt | off, with the reason), tuning_cache_path.",
            "properties": {"load_s": {"type": "number"}, "warm_up_s": {"type": "number"}}
          }
        }
      },
      "Live": {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"type": "string", "enum": ["ok", "draining"]}}
      },
      "Model": {
        "type": "object",
        "required": ["id", "object", "created", "owned_by"],
        "properties": {
          "id": {"type": "string"},
          "object": {"type": "string", "const": "model"},
          "created": {"type": "integer"},
          "owned_by": {"type": "string"}
        }
      },
      "ModelList": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
          "object": {"type": "string", "const": "list"},
          "data": {"type": "array", "items": {"$ref": "#/components/schemas/Model"}}
        }
      }
    }
  }
})json";

}  // namespace

std::string openapi_document(const std::string& version, bool api_key, bool ui) {
  auto doc = nlohmann::ordered_json::parse(kDocument);
  doc["info"]["version"] = version;
  if (!ui) {
    doc["paths"].erase("/");
    doc["paths"].erase("/ui/{asset}");
  }
  if (api_key)
    doc["security"] =
        nlohmann::ordered_json::array({{{"bearer", nlohmann::ordered_json::array()}}});
  return doc.dump();
}

}  // namespace clef::server
