package models_test

import (
	"bytes"
	"image/gif"
	"testing"

	"github.com/gantryhq/gantry/models"
)

func TestReadGIFInfo(t *testing.T) {
	t.Parallel()
	info, err := models.ReadGIFInfo(bytes.NewReader(gifOf(t, 10, 20, 0, 33)))
	if err != nil || info.Frames != 4 || info.DurationMs != 630 || info.Width != 8 || info.Height != 8 {
		t.Errorf("ReadGIFInfo = %+v, %v; want 4 frames, 630 ms, 8×8", info, err)
	}
	for _, bad := range []string{"", "GIF89a", "PNG..........", "GIF89a\x08\x00\x08\x00\x00\x00\x00;"} {
		if info, err := models.ReadGIFInfo(bytes.NewReader([]byte(bad))); err == nil {
			t.Errorf("ReadGIFInfo(%q) = %+v; want an error", bad, info)
		}
	}
	full := gifOf(t, 10)
	if _, err := models.ReadGIFInfo(bytes.NewReader(full[:len(full)-1])); err == nil {
		t.Error("ReadGIFInfo(no trailer) = nil; want an error")
	}
}

func TestReadWAVInfo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		data      []byte
		bytes, ms int64
		ok        bool
	}{
		{"one second", wavOf(44100, -1), 44100, 1000, true},
		{"streamed: the data chunk claims more than is there", wavOf(22050, 0x7ffff000), 22050, 500, true},
		{"silent", wavOf(0, -1), 0, 0, true},
		{"no data chunk", wavOf(10, -1)[:44], 0, 0, false},
		{"not RIFF", []byte("RIFX\x00\x00\x00\x00WAVE"), 0, 0, false},
		{"empty", nil, 0, 0, false},
	}
	for _, tt := range tests {
		info, err := models.ReadWAVInfo(bytes.NewReader(tt.data))
		if (err == nil) != tt.ok || info.DataBytes != tt.bytes || info.DurationMs != tt.ms {
			t.Errorf("%s: ReadWAVInfo = %+v, %v; want %d bytes, %d ms (ok %v)", tt.name, info, err, tt.bytes, tt.ms, tt.ok)
		}
	}
	if info, _ := models.ReadWAVInfo(bytes.NewReader(wavOf(4, -1))); info.SampleRate != 22050 || info.Channels != 1 || info.BitsPerSample != 16 || info.Format != 1 {
		t.Errorf("ReadWAVInfo format = %+v; want PCM, mono, 16-bit, 22050 Hz", info)
	}
}

// FuzzReadGIFInfo checks the block walker against image/gif: whenever the standard decoder
// reads a file, the walker counts the same frames and delays. Seeds: testdata/fuzz.
func FuzzReadGIFInfo(f *testing.F) {
	f.Add([]byte("GIF89a\x01\x00\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := models.ReadGIFInfo(bytes.NewReader(data))
		if err == nil && (info.Frames < 1 || info.DurationMs < 0) {
			t.Fatalf("ReadGIFInfo = %+v; want at least a frame and no negative duration", info)
		}
		if cfg, err := gif.DecodeConfig(bytes.NewReader(data)); err != nil || cfg.Width*cfg.Height > 1<<16 {
			return // the oracle would spend its time allocating pixels
		}
		g, gerr := gif.DecodeAll(bytes.NewReader(data))
		if gerr != nil {
			return
		}
		if err != nil {
			t.Fatalf("image/gif reads it (%d frames) but ReadGIFInfo = %v", len(g.Image), err)
		}
		var ms int64
		for _, d := range g.Delay {
			ms += int64(d) * 10
		}
		if info.Frames != len(g.Image) || info.DurationMs != ms {
			t.Fatalf("ReadGIFInfo = %d frames, %d ms; image/gif: %d frames, %d ms", info.Frames, info.DurationMs, len(g.Image), ms)
		}
	})
}

// FuzzReadWAVInfo checks the chunk walker never fails to stop and never reports more sound
// than the file holds. Seeds: testdata/fuzz.
func FuzzReadWAVInfo(f *testing.F) {
	f.Add(wavOf(8, -1))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := models.ReadWAVInfo(bytes.NewReader(data))
		if err != nil {
			return
		}
		if info.DataBytes < 0 || info.DataBytes > int64(len(data)) || info.DurationMs < 0 || info.Channels == 0 {
			t.Fatalf("ReadWAVInfo(%d bytes) = %+v", len(data), info)
		}
	})
}
