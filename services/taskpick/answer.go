package taskpick

import "github.com/coordkit/coordkit/libs/server"

// Answers are bounded in bytes, so that no request can make the service build (and the
// client receive) an answer of hundreds of megabytes: 1,000 Gets of one 256 KiB task in a
// Batch, ListDead of 1,000 large dead tasks, or a Pick of 100 large tasks.

// TaskOverheadBytes bounds what one task costs in an answer besides its payload and strings:
// the field names, numbers, times, state, the lease secret and the list's punctuation.
const TaskOverheadBytes = 256

// answerSlack bounds what an answer costs besides its tasks (total, truncated, brackets).
const answerSlack = 64

// AnswerBytes bounds the bytes one task takes in an answer, in either encoding: its payload
// as base64 (JSON), its strings (id, last error) at up to 6 bytes a byte (JSON's \u escapes),
// and TaskOverheadBytes. The binary encoding is always smaller. Engines that stop reading at
// a budget (Pick, ListDead) count tasks with it.
func AnswerBytes(payloadLen, stringsLen int) int {
	return 4*((payloadLen+2)/3) + 6*stringsLen + TaskOverheadBytes
}

// MinAnswerBytes is the smallest answer limit a service accepts: one task of the largest
// payload, id and last error, so that a single Get, Pick or ListDead always fits.
var MinAnswerBytes = AnswerBytes(MaxPayloadBytes, server.MaxKeyBytes+MaxReasonBytes) + answerSlack

// DefaultMaxAnswerBytes is the answer limit when Config leaves it unset.
const DefaultMaxAnswerBytes = server.MaxResponseBytes
