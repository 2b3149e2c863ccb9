"""The JSON schema keywords grammar.h enforces (type object / array / string / integer / boolean /
null, properties, required, additionalProperties false, items, minItems, maxItems, minLength,
maxLength, minimum, maximum, enum, anyOf, local $ref), checked in Python on the answers the
constrained runs give (tests/t_schema.sh, tests/t_toolchoice.sh).

valid(value, schema, root=None, closed=False): root resolves "#/..." references (default: schema);
closed: an object may hold no key outside its properties (a tool call's arguments: the grammar
writes no other key), else only where additionalProperties is false."""


def valid(v, s, root=None, closed=False):
    root = s if root is None else root
    if "$ref" in s:
        node = root
        for part in s["$ref"].split("/")[1:]:
            node = node[part]
        return valid(v, node, root, closed)
    if "anyOf" in s:
        return any(valid(v, b, root, closed) for b in s["anyOf"])
    if "enum" in s and v not in s["enum"]:
        return False
    t = s.get("type")
    if t == "object":
        if not isinstance(v, dict):
            return False
        props = s.get("properties", {})
        if any(k not in v for k in s.get("required", [])):
            return False
        if (closed or s.get("additionalProperties") is False) and any(k not in props for k in v):
            return False
        return all(valid(v[k], props[k], root, closed) for k in v if k in props)
    if t == "array":
        if not isinstance(v, list):
            return False
        if not s.get("minItems", 0) <= len(v) <= s.get("maxItems", 1 << 30):
            return False
        return all(valid(x, s.get("items", {}), root, closed) for x in v)
    if t == "string":
        return isinstance(v, str) and s.get("minLength", 0) <= len(v) <= s.get("maxLength", 1 << 30)
    if t == "integer":
        return (isinstance(v, int) and not isinstance(v, bool)
                and s.get("minimum", -1e300) <= v <= s.get("maximum", 1e300))
    if t == "boolean":
        return isinstance(v, bool)
    if t == "null":
        return v is None
    return t is None
