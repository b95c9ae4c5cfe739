package octavia

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/flowlb/flowlb/internal/server/octavia/fault"
)

// Query parameters that are not attribute filters.
var listParams = map[string]bool{
	"limit": true, "marker": true, "page_reverse": true, "sort": true, "sort_key": true, "sort_dir": true,
	"fields": true, "tags": true, "tags-any": true, "not-tags": true, "not-tags-any": true,
}

type sortKey struct {
	key  string
	desc bool
}

// page applies Octavia's list conventions (octavia/api/common/pagination.py)
// to a list's items (response types): attribute filters with AND
// semantics, tag filters, sort, limit/marker/page_reverse paging, and
// the page's links. fields= is the writer's (pick).
func page[T any](s *Server, r *http.Request, items []T, idKey string) ([]T, []Link, error) {
	q := r.URL.Query()
	tab := table[T]{items: items, columns: columnsOf(reflect.TypeFor[T]())}
	filtered, err := tab.filter(q)
	if err != nil {
		return nil, nil, err
	}
	if err := filtered.sort(q, idKey); err != nil {
		return nil, nil, err
	}
	limit, err := s.pageLimit(q, len(filtered.items))
	if err != nil {
		return nil, nil, err
	}
	pageItems, err := filtered.slicePage(q, idKey, limit)
	if err != nil {
		return nil, nil, err
	}
	links := []Link{}
	if n := len(pageItems.items); n > 0 {
		if n == limit {
			links = append(links, link(r, "next", pageItems.id(n-1, idKey), limit, false))
		}
		if q.Get("marker") != "" {
			links = append(links, link(r, "previous", pageItems.id(0, idKey), limit, true))
		}
	}
	if pageItems.items == nil {
		pageItems.items = []T{} // a page lists [], never null
	}
	return pageItems.items, links, nil
}

// table is a list's items with their attributes by name.
type table[T any] struct {
	items   []T
	columns map[string]column
}

// get is item i's attribute key as JSON decodes it (nil if it has none).
func (tab table[T]) get(i int, key string) any {
	c, ok := tab.columns[key]
	if !ok {
		return nil
	}
	return c.value(reflect.ValueOf(&tab.items[i]).Elem())
}

func (tab table[T]) id(i int, idKey string) string { return fmt.Sprint(tab.get(i, idKey)) }

// known reports whether the list may filter and sort on key: an
// attribute of its items' type (one that is given only sometimes, when
// an item has it).
func (tab table[T]) known(key string) bool {
	c, ok := tab.columns[key]
	if !ok || !c.omitEmpty {
		return ok
	}
	for i := range tab.items {
		if tab.get(i, key) != nil {
			return true
		}
	}
	return false
}

// filter keeps the items that match every attribute and tag filter; an
// unknown attribute is refused.
func (tab table[T]) filter(q url.Values) (table[T], error) {
	for k := range q {
		if !listParams[k] && !tab.known(k) {
			return tab, fault.BadRequest("One or more arguments are either duplicate or invalid")
		}
	}
	out := tab
	out.items = nil
	for i := range tab.items {
		if matches(func(key string) any { return tab.get(i, key) }, q) {
			out.items = append(out.items, tab.items[i])
		}
	}
	return out, nil
}

// sort orders the items by the query's sort keys, or by created_at
// then id (flavors, AZs and quotas by their key) when it names none.
func (tab table[T]) sort(q url.Values, idKey string) error {
	keys, err := sortKeys(q)
	if err != nil {
		return err
	}
	if len(q["sort"])+len(q["sort_key"]) == 0 {
		keys = keys[:0]
		for _, k := range []string{"created_at", "id", idKey} {
			if tab.known(k) && !slices.ContainsFunc(keys, func(x sortKey) bool { return x.key == k }) {
				keys = append(keys, sortKey{key: k})
			}
		}
	}
	for _, k := range keys {
		if !tab.known(k.key) {
			return fault.BadRequest("Supplied sort key '%s' is not valid.", k.key)
		}
	}
	// Each item's sort values, once.
	order := make([]int, len(tab.items))
	values := make([][]any, len(tab.items))
	for i := range tab.items {
		order[i] = i
		for _, k := range keys {
			values[i] = append(values[i], tab.get(i, k.key))
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		for j, k := range keys {
			c := compare(values[order[a]][j], values[order[b]][j])
			if c != 0 {
				return (c < 0) != k.desc
			}
		}
		return false
	})
	sorted := make([]T, len(order))
	for i, o := range order {
		sorted[i] = tab.items[o]
	}
	copy(tab.items, sorted)
	return nil
}

// pageLimit is the page size: limit, at most pagination_max_limit; a
// limit below 1 means no limit.
func (s *Server) pageLimit(q url.Values, total int) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return s.cfg.PaginationMaxLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fault.BadRequest("Supplied pagination limit '%s' is not valid.", v)
	}
	if n < 1 {
		return total, nil
	}
	return min(n, s.cfg.PaginationMaxLimit), nil
}

// slicePage cuts the page after (or, with page_reverse, before) the
// marker.
func (tab table[T]) slicePage(q url.Values, idKey string, limit int) (table[T], error) {
	reverse := strings.EqualFold(q.Get("page_reverse"), "true")
	marker := q.Get("marker")
	start, end := 0, len(tab.items)
	if marker != "" {
		pos := -1
		for i := range tab.items {
			if tab.id(i, idKey) == marker {
				pos = i
				break
			}
		}
		if pos < 0 {
			return tab, fault.BadRequest("Supplied pagination marker '%s' is not valid.", marker)
		}
		if reverse {
			end = pos
		} else {
			start = pos + 1
		}
	}
	if reverse {
		tab.items = tab.items[max(end-limit, 0):end]
	} else {
		tab.items = tab.items[start:min(start+limit, end)]
	}
	return tab, nil
}

// matches applies attribute and tag filters to an item whose attributes
// get gives.
func matches(get func(key string) any, q url.Values) bool {
	for k, vs := range q {
		if listParams[k] {
			continue
		}
		attr := get(k)
		got := scalar(attr)
		ok := false
		for _, v := range vs {
			if got == v || (isBool(attr) && strings.EqualFold(got, v)) {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	tags := map[string]bool{}
	if ts, ok := get("tags").([]any); ok {
		for _, t := range ts {
			tags[fmt.Sprint(t)] = true
		}
	}
	list := func(k string) []string {
		var out []string
		for _, v := range q[k] {
			for _, t := range strings.Split(v, ",") {
				if t != "" {
					out = append(out, t)
				}
			}
		}
		return out
	}
	all := func(ts []string) bool {
		for _, t := range ts {
			if !tags[t] {
				return false
			}
		}
		return true
	}
	anyOf := func(ts []string) bool {
		for _, t := range ts {
			if tags[t] {
				return true
			}
		}
		return false
	}
	if ts := list("tags"); len(ts) > 0 && !all(ts) {
		return false
	}
	if ts := list("tags-any"); len(ts) > 0 && !anyOf(ts) {
		return false
	}
	if ts := list("not-tags"); len(ts) > 0 && all(ts) {
		return false
	}
	if ts := list("not-tags-any"); len(ts) > 0 && anyOf(ts) {
		return false
	}
	return true
}

func isBool(v any) bool { _, ok := v.(bool); return ok }

// scalar renders a JSON value as a query-string value.
func scalar(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	default:
		return fmt.Sprint(x)
	}
}

// compare orders JSON values: null first, numbers numerically, the rest
// as strings.
func compare(a, b any) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	if x, ok := a.(float64); ok {
		if y, ok := b.(float64); ok {
			switch {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		}
	}
	return strings.Compare(scalar(a), scalar(b))
}

// sortKeys reads sort=k1:asc,k2:desc or sort_key/sort_dir pairs; the
// default is created_at then id, ascending.
func sortKeys(q url.Values) ([]sortKey, error) {
	var keys []sortKey
	dir := func(d string) (bool, error) {
		switch strings.ToLower(d) {
		case "", "asc":
			return false, nil
		case "desc":
			return true, nil
		}
		return false, fault.BadRequest("Supplied sort direction '%s' is not valid.", d)
	}
	for _, v := range q["sort"] {
		for _, part := range strings.Split(v, ",") {
			k, d, _ := strings.Cut(strings.TrimSpace(part), ":")
			desc, err := dir(d)
			if err != nil {
				return nil, err
			}
			keys = append(keys, sortKey{k, desc})
		}
	}
	dirs := q["sort_dir"]
	for i, k := range q["sort_key"] {
		d := ""
		if i < len(dirs) {
			d = dirs[i]
		}
		desc, err := dir(d)
		if err != nil {
			return nil, err
		}
		keys = append(keys, sortKey{k, desc})
	}
	if len(keys) == 0 {
		keys = []sortKey{{"created_at", false}, {"id", false}}
	}
	return keys, nil
}

func link(r *http.Request, rel, marker string, limit int, reverse bool) Link {
	u := *requestURL(r)
	u.Scheme = "http"
	if r.TLS != nil {
		u.Scheme = "https"
	}
	u.Host = r.Host
	q := u.Query()
	q.Set("limit", strconv.Itoa(limit))
	q.Set("marker", marker)
	q.Del("page_reverse")
	if reverse {
		q.Set("page_reverse", "True")
	}
	u.RawQuery = q.Encode()
	return Link{Href: u.String(), Rel: rel}
}

// fieldList reads fields=a&fields=b (or comma-separated).
func fieldList(q url.Values) []string {
	var out []string
	for _, v := range q["fields"] {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				out = append(out, f)
			}
		}
	}
	return out
}

// pick keeps, in an answer as encoded, only the fields= asked for: in
// the one object of a single-object answer (list ""), or in each item of
// the page's list. Members keep their order; a field asked for twice
// comes once, one the object lacks not at all.
func pick(answer []byte, list string, fields []string) ([]byte, error) {
	keep := make(map[string]bool, len(fields))
	for _, f := range fields {
		keep[f] = true
	}
	d := jsontext.NewDecoder(bytes.NewBuffer(answer))
	out := make([]byte, 0, len(answer))
	object := func(keep map[string]bool) error {
		if _, err := d.ReadToken(); err != nil { // {
			return err
		}
		out = append(out, '{')
		n := 0
		for d.PeekKind() != '}' {
			name, err := d.ReadToken()
			if err != nil {
				return err
			}
			k := name.String()
			v, err := d.ReadValue()
			if err != nil {
				return err
			}
			if keep != nil && !keep[k] {
				continue
			}
			if n++; n > 1 {
				out = append(out, ',')
			}
			if out, err = jsontext.AppendQuote(out, k); err != nil {
				return err
			}
			out = append(append(out, ':'), v...)
		}
		_, err := d.ReadToken() // }
		out = append(out, '}')
		return err
	}
	if _, err := d.ReadToken(); err != nil {
		return nil, err
	}
	out = append(out, '{')
	for n := 0; d.PeekKind() != '}'; n++ {
		name, err := d.ReadToken()
		if err != nil {
			return nil, err
		}
		k := name.String()
		if n > 0 {
			out = append(out, ',')
		}
		if out, err = jsontext.AppendQuote(out, k); err != nil {
			return nil, err
		}
		out = append(out, ':')
		switch {
		case list == "":
			err = object(keep)
		case k == list && d.PeekKind() == '[':
			_, err = d.ReadToken()
			out = append(out, '[')
			for i := 0; err == nil && d.PeekKind() != ']'; i++ {
				if i > 0 {
					out = append(out, ',')
				}
				err = object(keep)
			}
			if err == nil {
				_, err = d.ReadToken()
				out = append(out, ']')
			}
		default:
			var v jsontext.Value
			v, err = d.ReadValue()
			out = append(out, v...)
		}
		if err != nil {
			return nil, err
		}
	}
	return append(out, '}', '\n'), nil
}

// A column is an attribute a list filters and sorts on: a member of its
// items' JSON, or an attribute only the list sees (a filter tag, see
// response.go).
type column struct {
	index []int
	// omitEmpty: the attribute is absent from an item whose value is the
	// zero value.
	omitEmpty bool
}

var columnCache sync.Map // reflect.Type → map[string]column

// columnsOf are the columns of the response type t.
func columnsOf(t reflect.Type) map[string]column {
	if c, ok := columnCache.Load(t); ok {
		return c.(map[string]column)
	}
	cols := map[string]column{}
	var walk func(t reflect.Type, index []int)
	walk = func(t reflect.Type, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			idx := append(append([]int(nil), index...), i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case f.Anonymous && f.Type.Kind() == reflect.Struct:
				walk(f.Type, idx)
			case name == "-":
				if tag := f.Tag.Get("filter"); tag != "" {
					name, opt, _ := strings.Cut(tag, ",")
					cols[name] = column{index: idx, omitEmpty: opt == "omitempty"}
				}
			case name != "" && f.IsExported():
				cols[name] = column{index: idx}
			}
		}
	}
	walk(t, nil)
	columnCache.Store(t, cols)
	return cols
}

// value is the column's value in item v as its JSON decodes to (numbers
// as float64, lists as []any, objects as maps), which the filters and
// the sort compare.
func (c column) value(v reflect.Value) any {
	f := v.FieldByIndex(c.index)
	if c.omitEmpty && f.IsZero() {
		return nil
	}
	return jsonValue(f)
}

func jsonValue(v reflect.Value) any {
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return v.Bool()
	case reflect.Int, reflect.Int64:
		return float64(v.Int())
	case reflect.Float64:
		return v.Float()
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return jsonValue(v.Elem())
	case reflect.Slice, reflect.Map:
		if v.IsNil() {
			return nil
		}
		if xs, ok := v.Interface().([]string); ok {
			out := make([]any, len(xs))
			for i, x := range xs {
				out[i] = x
			}
			return out
		}
	}
	// Lists of objects and objects take the long way, and only when a
	// list filters or sorts on them.
	b, err := json.Marshal(v.Interface())
	if err != nil {
		return nil
	}
	var x any
	_ = json.Unmarshal(b, &x)
	return x
}
