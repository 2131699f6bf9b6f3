package models

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The meter measures produced files without decoding their pixels or samples: a GIF's frames
// and delays, and a WAV's format and length, come from walking their blocks, so that measuring
// a clip costs little memory whatever it holds.

// GIFInfo is what metering needs of a GIF.
type GIFInfo struct {
	Width, Height int   // the logical screen
	Frames        int   // images in the file
	DurationMs    int64 // the sum of the frames' delays
}

// ReadGIFInfo walks a GIF's blocks: each image counts as a frame, shown for the delay of the
// graphic control extension before it (none: 0). Pixel data is skipped, not decoded.
func ReadGIFInfo(r io.Reader) (GIFInfo, error) {
	br := bufio.NewReader(r)
	var hdr [13]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return GIFInfo{}, fmt.Errorf("reading the header: %w", err)
	}
	if v := string(hdr[:6]); v != "GIF87a" && v != "GIF89a" {
		return GIFInfo{}, errors.New("not a GIF")
	}
	info := GIFInfo{Width: int(binary.LittleEndian.Uint16(hdr[6:])), Height: int(binary.LittleEndian.Uint16(hdr[8:]))}
	if hdr[10]&0x80 != 0 {
		if err := skip(br, 3<<(hdr[10]&7+1)); err != nil {
			return GIFInfo{}, fmt.Errorf("reading the global colour table: %w", err)
		}
	}
	delay := int64(0) // centiseconds, from the last graphic control extension
	for {
		b, err := br.ReadByte()
		if err != nil {
			return GIFInfo{}, fmt.Errorf("reading a block: %w (no trailer)", err)
		}
		switch b {
		case 0x21: // extension
			label, err := br.ReadByte()
			if err != nil {
				return GIFInfo{}, err
			}
			if label == 0xF9 {
				var gce [6]byte // size 4, flags, delay (2), transparent index, terminator
				if _, err := io.ReadFull(br, gce[:]); err != nil {
					return GIFInfo{}, fmt.Errorf("reading a graphic control extension: %w", err)
				}
				if gce[0] != 4 || gce[5] != 0 {
					return GIFInfo{}, errors.New("malformed graphic control extension")
				}
				delay = int64(binary.LittleEndian.Uint16(gce[2:]))
				continue
			}
			if label == 0x01 { // plain text: a 12-byte block first, read whatever its size byte says, as image/gif does
				if err := skip(br, 13); err != nil {
					return GIFInfo{}, fmt.Errorf("reading a plain text extension: %w", err)
				}
			}
			if err := skipSubBlocks(br); err != nil {
				return GIFInfo{}, err
			}
		case 0x2C: // image descriptor
			var d [9]byte
			if _, err := io.ReadFull(br, d[:]); err != nil {
				return GIFInfo{}, fmt.Errorf("reading an image descriptor: %w", err)
			}
			if d[8]&0x80 != 0 {
				if err := skip(br, 3<<(d[8]&7+1)); err != nil {
					return GIFInfo{}, fmt.Errorf("reading a local colour table: %w", err)
				}
			}
			if _, err := br.ReadByte(); err != nil { // LZW minimum code size
				return GIFInfo{}, err
			}
			if err := skipSubBlocks(br); err != nil {
				return GIFInfo{}, err
			}
			info.Frames++
			info.DurationMs += delay * 10
			delay = 0
		case 0x3B: // trailer
			if info.Frames == 0 {
				return GIFInfo{}, errors.New("the GIF has no image")
			}
			return info, nil
		default:
			return GIFInfo{}, fmt.Errorf("unknown block 0x%02x", b)
		}
	}
}

func skip(br *bufio.Reader, n int) error {
	_, err := br.Discard(n)
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// skipSubBlocks skips data sub-blocks up to and including the empty one that ends them.
func skipSubBlocks(br *bufio.Reader) error {
	for {
		n, err := br.ReadByte()
		if err != nil {
			return fmt.Errorf("reading data sub-blocks: %w", err)
		}
		if n == 0 {
			return nil
		}
		if err := skip(br, int(n)); err != nil {
			return fmt.Errorf("reading data sub-blocks: %w", err)
		}
	}
}

// WAVInfo is what metering needs of a WAV file.
type WAVInfo struct {
	Format        int // 1 = PCM
	Channels      int
	SampleRate    int
	BitsPerSample int
	DataBytes     int64 // of sound: the data chunk as present in the file
	DurationMs    int64
}

// ReadWAVInfo walks a RIFF WAVE file's chunks for its format and the length of its sound. A
// data chunk that claims more bytes than the file holds (as a WAV streamed to a pipe does)
// counts the bytes present.
func ReadWAVInfo(r io.Reader) (WAVInfo, error) {
	br := bufio.NewReader(r)
	var hdr [12]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return WAVInfo{}, fmt.Errorf("reading the header: %w", err)
	}
	if string(hdr[:4]) != "RIFF" || string(hdr[8:]) != "WAVE" {
		return WAVInfo{}, errors.New("not a RIFF WAVE file")
	}
	var info WAVInfo
	byteRate, haveFmt := 0, false
	for {
		var ch [8]byte
		if _, err := io.ReadFull(br, ch[:]); err != nil {
			return WAVInfo{}, errors.New("no data chunk")
		}
		size := int64(binary.LittleEndian.Uint32(ch[4:]))
		switch string(ch[:4]) {
		case "fmt ":
			if size < 16 {
				return WAVInfo{}, errors.New("short fmt chunk")
			}
			var f [16]byte
			if _, err := io.ReadFull(br, f[:]); err != nil {
				return WAVInfo{}, fmt.Errorf("reading the fmt chunk: %w", err)
			}
			info.Format = int(binary.LittleEndian.Uint16(f[0:]))
			info.Channels = int(binary.LittleEndian.Uint16(f[2:]))
			info.SampleRate = int(binary.LittleEndian.Uint32(f[4:]))
			byteRate = int(binary.LittleEndian.Uint32(f[8:]))
			info.BitsPerSample = int(binary.LittleEndian.Uint16(f[14:]))
			if info.Channels == 0 || info.SampleRate == 0 || byteRate == 0 {
				return WAVInfo{}, errors.New("fmt chunk with no channels, rate or byte rate")
			}
			haveFmt = true
			if err := discard(br, size-16+size%2); err != nil {
				return WAVInfo{}, fmt.Errorf("reading the fmt chunk: %w", err)
			}
		case "data":
			if !haveFmt {
				return WAVInfo{}, errors.New("data chunk before the fmt chunk")
			}
			n, err := io.Copy(io.Discard, io.LimitReader(br, size))
			if err != nil {
				return WAVInfo{}, fmt.Errorf("reading the data chunk: %w", err)
			}
			info.DataBytes = n
			info.DurationMs = n * 1000 / int64(byteRate)
			return info, nil
		default:
			if err := discard(br, size+size%2); err != nil {
				return WAVInfo{}, fmt.Errorf("reading chunk %q: %w", ch[:4], err)
			}
		}
	}
}

// discard skips n bytes (n may exceed an int on 32-bit machines: chunk sizes are 32-bit).
func discard(br *bufio.Reader, n int64) error {
	m, err := io.CopyN(io.Discard, br, n)
	if err == nil && m < n {
		err = io.ErrUnexpectedEOF
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}
