package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/oas"
)

// This file is `gantry volume create|list|get|resize|delete`: network volumes (issue 30).

var volumeUsage = map[string]string{
	"create": "gantry volume create --name NAME --size GB --data-center DC [--type STANDARD|HIGH_PERFORMANCE]\n\nCreates a network volume of SIZE GB (10 to 4096) in a data center one of the pools serves and\ncan store volumes in; endpoints naming it (--network-volume) see it at /runpod-volume.",
	"list":   "gantry volume list\n\nLists the operator's volumes (from the server's config, read-only) and yours.",
	"get":    "gantry volume get VOLUME_ID",
	"resize": "gantry volume resize VOLUME_ID [--size GB] [--name NAME]\n\nGrows a volume to SIZE GB (a volume never shrinks), or renames it.",
	"delete": "gantry volume delete VOLUME_ID [--yes]\n\nDeletes a volume and all its data, for good. It asks first (type yes); --yes does not.\nRefused while an endpoint names the volume.",
}

// volumeCmd runs `gantry volume create|list|get|resize|delete`.
func (a *app) volumeCmd(ctx context.Context, args []string) error {
	sub, args, err := a.subcommand("volume", args, "create", "list", "get", "resize", "delete")
	if err != nil {
		return err
	}
	fs := a.flagSet("volume "+sub, volumeUsage[sub])
	c := a.commonFlags(fs)
	var name, dc, typ string
	var size int
	var yes bool
	switch sub {
	case "create":
		fs.StringVar(&name, "name", "", "the volume's name (required)")
		fs.IntVar(&size, "size", 0, "its size in GB, 10 to 4096 (required)")
		fs.StringVar(&dc, "data-center", "", "its data center (required; gantry catalog gpus lists them)")
		fs.StringVar(&typ, "type", "", "STANDARD (the default) or HIGH_PERFORMANCE")
	case "resize":
		fs.IntVar(&size, "size", 0, "the new size in GB, at least the current one")
		fs.StringVar(&name, "name", "", "a new name")
	case "delete":
		fs.BoolVar(&yes, "yes", false, "delete without asking")
	}
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	switch sub {
	case "create", "list":
		err = needArgs(fs, pos)
	default:
		err = needArgs(fs, pos, "VOLUME_ID")
	}
	if err != nil {
		return err
	}
	switch {
	case sub == "create" && (name == "" || size == 0 || dc == ""):
		return usagef("volume create: --name, --size and --data-center are required")
	case sub == "resize" && size == 0 && name == "":
		return usagef("volume resize: give --size or --name")
	}
	cn, err := a.connect(c)
	if err != nil {
		return err
	}
	switch sub {
	case "create":
		req := &oas.CreateNetworkVolumeRequest{Name: name, Size: size, DataCenter: dc}
		if typ != "" {
			req.Type = oas.NewOptVolumeType(oas.VolumeType(typ))
		}
		v, err := answer[oas.NetworkVolumeHeaders](cn.api.CreateNetworkVolume(ctx, req)).get(cn, "creating the volume")
		if err != nil {
			return err
		}
		return cn.out.volumes(&v.Response)
	case "list":
		l, err := answer[oas.NetworkVolumeListHeaders](cn.api.ListNetworkVolumes(ctx)).get(cn, "listing volumes")
		if err != nil {
			return err
		}
		return cn.out.volumes(&l.Response, l.Response.NetworkVolumes...)
	case "get":
		v, err := answer[oas.NetworkVolumeHeaders](cn.api.GetNetworkVolume(ctx, oas.GetNetworkVolumeParams{NetworkVolumeId: pos[0]})).get(cn, "getting the volume")
		if err != nil {
			return err
		}
		return cn.out.volumes(&v.Response)
	case "resize":
		req := &oas.UpdateNetworkVolumeRequest{}
		if size != 0 {
			req.Size = oas.NewOptInt(size)
		}
		if name != "" {
			req.Name = oas.NewOptString(name)
		}
		v, err := answer[oas.NetworkVolumeHeaders](cn.api.UpdateNetworkVolume(ctx, req, oas.UpdateNetworkVolumeParams{NetworkVolumeId: pos[0]})).get(cn, "resizing the volume")
		if err != nil {
			return err
		}
		return cn.out.volumes(&v.Response)
	}
	if !yes {
		fmt.Fprintf(a.stderr, "Delete network volume %s and all the data on it, for good? Type yes to confirm: ", pos[0])
		line, _ := bufio.NewReader(a.stdin).ReadString('\n')
		if answer := strings.TrimSpace(line); answer != "yes" && answer != "y" {
			fmt.Fprintln(a.stderr)
			return usagef("volume delete: not confirmed, nothing deleted (--yes deletes without asking)")
		}
	}
	if _, err := answer[oas.DeleteNetworkVolumeNoContent](cn.api.DeleteNetworkVolume(ctx, oas.DeleteNetworkVolumeParams{NetworkVolumeId: pos[0]})).get(cn, "deleting the volume"); err != nil {
		return err
	}
	return cn.out.deleted("network volume", pos[0])
}

// volumes prints volumes: v is what -o json prints, vs the table's rows (v itself when none
// are given).
func (p *printer) volumes(v interface{ MarshalJSON() ([]byte, error) }, vs ...oas.NetworkVolume) error {
	if one, ok := v.(*oas.NetworkVolume); ok {
		vs = []oas.NetworkVolume{*one}
	}
	if p.format == "id" { // a list's items are under networkVolumes, as on RunPod
		for _, x := range vs {
			if _, err := fmt.Fprintln(p.w, printable(x.ID)); err != nil {
				return err
			}
		}
		return nil
	}
	return p.emit(v, func(t *table) {
		t.row("ID", "NAME", "SIZE", "DATA CENTER", "TYPE", "USED", "OPERATOR", "CREATED")
		for _, x := range vs {
			used := ""
			if n, ok := x.UsedBytes.Get(); ok {
				used = strconv.FormatInt(n, 10)
			}
			t.row(x.ID, x.Name, strconv.Itoa(x.Size)+" GB", x.DataCenter, string(x.Type), used, yesNo(x.Operator), when(x.CreatedAt.Or(time.Time{})))
		}
	})
}

// warnings prints the Warning headers of the server's answers on stderr: an endpoint naming a
// network volume that a pool cannot mount at /runpod-volume is warned so (RFC 9111 code 299).
type warnings struct {
	c   *http.Client
	err io.Writer
}

func (w warnings) Do(req *http.Request) (*http.Response, error) {
	resp, err := w.c.Do(req)
	if err == nil {
		for _, v := range resp.Header.Values("Warning") {
			text := v
			if rest, ok := strings.CutPrefix(v, `299 - "`); ok {
				text = strings.ReplaceAll(strings.ReplaceAll(strings.TrimSuffix(rest, `"`), `\"`, `"`), `\\`, `\`)
			}
			fmt.Fprintln(w.err, "gantry: warning:", printable(text))
		}
	}
	return resp, err
}
