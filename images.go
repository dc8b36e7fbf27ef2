package main

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/distribution/reference"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// maxImageLength bounds an image reference: the container runtime and the
// API server would take longer ones, but nothing real is that long.
const maxImageLength = 512

// validateRepository checks the input's image: a repository (a mirror's, or
// the official one), never a tag or digest, since the tag is spec.version.
// The grammar is the container runtimes' own (distribution/reference).
func validateRepository(p *field.Path, repo string) field.ErrorList {
	const msg = "must be an image repository without tag or digest, e.g. postgres or registry.example.com/mirror/postgres (the tag is spec.version; pin tags or digests in images)"
	named, err := reference.ParseNormalizedNamed(repo)
	switch {
	case err != nil:
		return field.ErrorList{field.Invalid(p, repo, msg+": "+err.Error())}
	case !reference.IsNameOnly(named) || len(repo) > maxImageLength:
		return field.ErrorList{field.Invalid(p, repo, msg)}
	}
	return nil
}

// tagVersionPattern is the PostgreSQL version a tag starts with.
var tagVersionPattern = regexp.MustCompile(`^([0-9]+)(?:\.([0-9]+))?`)

// tagVersion is the PostgreSQL version a tag starts with, and its major's
// digits: "15.8-bookworm" gives "15.8" and "15"; a tag such as "latest"
// gives "" and "". Every version read from an image's tag is read here.
func tagVersion(tag string) (version, major string) {
	if m := tagVersionPattern.FindStringSubmatch(tag); m != nil {
		return m[0], m[1]
	}
	return "", ""
}

// resolveImages validates the input's images: every key a version
// spec.version could hold, every value a whole reference pinning a tag or a
// digest, and a tag that names a version naming the key's (a "15" entry
// running "16.2" would upgrade a major in place, which PostgreSQL's data
// directory cannot follow). Errors name input.images[key].
func resolveImages(p *field.Path, in map[string]string) (map[string]string, field.ErrorList) {
	if len(in) == 0 {
		return nil, nil
	}
	var errs field.ErrorList
	out := make(map[string]string, len(in))
	for _, k := range slices.Sorted(maps.Keys(in)) {
		kp, ref := p.Key(k), in[k]
		v, ferr := parseVersion(kp, k)
		if ferr != nil {
			ferr.Detail = "must be a PostgreSQL version spec.version can hold, a major (\"15\") or a major.minor (\"15.8\"): " + ferr.Detail
			errs = append(errs, ferr)
			continue
		}
		named, err := reference.ParseNormalizedNamed(ref)
		if err != nil || len(ref) > maxImageLength {
			msg := "must be an image reference, e.g. registry.example.com/postgres:15.8@sha256:<digest>"
			if err != nil {
				msg += ": " + err.Error()
			}
			errs = append(errs, field.Invalid(kp, ref, msg))
			continue
		}
		tagged, hasTag := named.(reference.Tagged)
		_, hasDigest := named.(reference.Digested)
		if !hasTag && !hasDigest {
			errs = append(errs, field.Invalid(kp, ref, "must pin a tag or a digest (a bare repository would run :latest, whatever major that is)"))
			continue
		}
		if hasTag {
			if version, major := tagVersion(tagged.Tag()); version != "" {
				if n, _ := strconv.Atoi(major); n != v.Major {
					errs = append(errs, field.Invalid(kp, ref, fmt.Sprintf("the tag %q is PostgreSQL %s, not %d", tagged.Tag(), major, v.Major)))
					continue
				}
			}
		}
		out[k] = ref
	}
	return out, errs
}

// imageFor is the image of the PostgreSQL version v: the input's entry for
// exactly v; for a major.minor without one, its major's entry only when
// that is tagged exactly v (a minor the user wrote is never swapped for
// another one); otherwise the repository with the tag v.
func imageFor(repo string, images map[string]string, v pgVersion) string {
	if ref, ok := images[v.Tag]; ok {
		return ref
	}
	if ref, ok := images[strconv.Itoa(v.Major)]; ok {
		if named, err := reference.ParseNormalizedNamed(ref); err == nil {
			if t, ok := named.(reference.Tagged); ok && t.Tag() == v.Tag {
				return ref
			}
		}
	}
	return repo + ":" + v.Tag
}

// imageVersion is the PostgreSQL version an image reference runs, and its
// major's digits (tagVersion), for status.version and the running major:
// the version its tag starts with, or "" for a reference without one (a
// digest alone).
func imageVersion(img string) (version, major string) {
	named, err := reference.ParseNormalizedNamed(img)
	if err != nil {
		// Not ours (someone edited the StatefulSet): the text after the
		// last ':' of the last path segment, as before.
		last := img[strings.LastIndex(img, "/")+1:]
		if i := strings.LastIndex(last, ":"); i >= 0 {
			return tagVersion(last[i+1:])
		}
		return "", ""
	}
	if t, ok := named.(reference.Tagged); ok {
		return tagVersion(t.Tag())
	}
	return "", ""
}
