// Package models is Gantry's ready-made models (spec 1, 4.4): the catalog of models with its
// built-in defaults (overridden and extended by the `models:` section of the config file), the
// metering rules that price what a model job produced, and the built-in CPU model workers that
// `gantry worker NAME` runs (images gantry/NAME).
//
// Every model runs on a platform-owned endpoint whose id is the model's slug, so
// `POST /v2/{slug}/run` works with any user's key. A model's type fixes its input, its output
// and its billing unit:
//
//	type               worker          output                           billed per
//	IMAGE_GENERATION   gantry/image    image_url (PNG), width, height   megapixel
//	VIDEO_GENERATION   gantry/video    video_url (GIF), duration_ms     5 seconds
//	TEXT_TO_SPEECH     gantry/speech   audio_url (WAV), duration_ms     1000 characters
//	TEXT_GENERATION    gantry/text     text, input_tokens, output_tokens, metrics; streams tokens
//	                                                                    1M tokens
//
// The built-in workers are honest stand-ins that run on any CPU, not generative models: the
// image is painted from a hash of the prompt, the clip is such images drifting over time,
// speech comes from Debian's espeak-ng (a formant synthesiser), and the text model streams the
// prompt's words back in reverse. A real model plugs in by naming its image in the config: it
// must accept the type's input and produce the type's output, storing its file through the
// worker protocol's job-file route (worker.Responder.PutFile).
//
// Metering reads what was produced, never what was asked for: the PNG's own width and height,
// the GIF's frame delays, the WAV's presence and the characters of the input text it speaks,
// and the whitespace-separated words of the prompt and of the generated text. See Measure for
// the exact rules and their rounding.
package models
