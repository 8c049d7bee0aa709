"""Semantics-preserving patches that take moto 5.2.5's DynamoDB from quadratic to linear per job, and its
item responses from a walk of the API's shapes to one ``json.dumps``; and one that makes it as atomic as
DynamoDB.

One request at a time
    DynamoDB applies each request (a conditional write, a transaction) atomically. moto checks a condition
    and then writes, in Python: two threads' requests (a test's workers, the moto server's threads) can
    interleave between the two, and both conditional writes land. The patch serves moto's DynamoDB
    requests one at a time.

TransactWriteItems

Why: to be able to roll a cancelled transaction back, moto deep-copies the *whole table* before running
it - once per item of the transaction (the copy sits inside the loop over items). Harvester's engine
writes every counted move as a transaction of up to 100 items, so a 2,000-page job made moto copy a
table of thousands of items hundreds of thousands of times: the end-to-end test ran for over ten minutes.

The patch snapshots only the items the transaction touches (the keys of its Put/Update/Delete/
ConditionCheck operations, as they are before it runs), lets moto's own code run the transaction with
its table copy turned into the identity, and on any failure puts exactly those items back. A transaction
can only change the items it names, so restoring them is the same as restoring the whole table; the
errors moto raises (cancellation reasons included) are moto's own.

Query
    A base-table Query (no index) makes moto list *every item of the table*, sorted, and then keep those of
    the queried partition. The patch hands moto's query code that partition's items alone, in the same
    order ``all_items`` would give them; moto's own filtering, sorting, paging and serialising then run
    unchanged. Index queries and scans are left alone.

Projection
    A ProjectionExpression of top-level attribute names makes moto turn each item into Python values
    (boto3's deserializer) and back, to keep the named attributes. The patch keeps them directly (the
    item is moto's deep copy already); nested paths and list indexes go to moto's code.

Item responses
    moto serialises every response by walking the operation's output shape, member by member: for a
    Query of a hundred items of a dozen attributes that is most of the request's time. For the item
    operations (their outputs hold items, keys, counts and consumed capacity: no timestamp), the patch
    writes the same result as JSON at once: a binary value base64, a missing (None) member left out, as
    the shape walk does. Errors and every other operation take moto's serializer.

Update expressions
    moto parses an UpdateExpression twice a request (once to check the names and values it uses, once to
    run it) and hands the tree to a validator, which deep-copies it before resolving it against the request's
    values and the item. The patch parses each expression text once (the trees are only read, or copied
    first), and lets each of the validator's ten tree walks build its table of node kinds once instead of
    twice at every node (the tables are literals of the walk's own methods) and answer its type checks
    once per node type (moto's ``nodes_to_be_processed`` is then asked once per node type).

    Of the ten walks, the first three only check the tree (at most one ADD, REMOVE and SET clause; no path
    updated twice or overlapping another; no key attribute updated) and change nothing in it: what they
    find depends on the expression, its attribute names and the table's key attributes alone. The patch
    runs them once for each such triple that passes them (every request whose triple has not passed, so
    every refused one, runs them as moto does), and copies the validator's tree node by node, as
    ``deepcopy`` would (the same classes, attributes and parents; a tree of any other make is deep-copied).

Like tests/aws/moto_speedups.py, the patches apply only to the exact moto code they were checked against.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import inspect
import json
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import moto
from moto.core.responses import ActionResult
from moto.dynamodb import models as dynamodb_models
from moto.dynamodb import responses as dynamodb_responses
from moto.dynamodb.models import dynamo_type
from moto.dynamodb.models import table as table_models
from moto.dynamodb.parsing import ast_nodes, expressions, validators

CHECKED_SOURCES = {
    "DynamoDBBackend.transact_write_items": (dynamodb_models.DynamoDBBackend, "81db2cb7d94e39c9"),
    "Table.query": (table_models.Table, "002b4d00be6df07c"),
    "Table.all_items": (table_models.Table, "c80d2ee3c896acd0"),
    "Item.project": (dynamo_type.Item, "f411e6d8b56886f4"),
    "ActionResult.execute_result": (ActionResult, "6333faa349b58671"),
    "DynamoResult.__init__": (dynamodb_responses.DynamoResult, "e2394775cd5ef6ad"),
    "UpdateExpressionParser.make": (expressions.UpdateExpressionParser, "2c00ed96d6e191f2"),
    "DepthFirstTraverser.nodes_to_be_processed": (ast_nodes.DepthFirstTraverser, "1c2c84c8097e3517"),
    "DepthFirstTraverser.process": (ast_nodes.DepthFirstTraverser, "58328ec7c2f9b1f9"),
    "DepthFirstTraverser.traverse_node_recursively": (ast_nodes.DepthFirstTraverser, "d7f01d9b45cf9f64"),
    "Validator.__init__": (validators.Validator, "9489b532dd0fb359"),
    "Validator.validate": (validators.Validator, "5a99f0d36c7b7b8e"),
    "UpdateExpressionValidator.get_ast_processors": (validators.UpdateExpressionValidator, "918400bbecd67e83"),
    "ActionCountValidator.verify_action_counts": (validators.ActionCountValidator, "8cd8c9a3ae3a414a"),
    "OverlappingPathsValidator.__init__": (validators.OverlappingPathsValidator, "575ea267a6dd07fb"),
    "OverlappingPathsValidator.check_for_overlapping_paths": (validators.OverlappingPathsValidator, "2488117d3c3a1f22"),
    "UpdateHashRangeKeyValidator.__init__": (validators.UpdateHashRangeKeyValidator, "ccfd8dde85fcc9bd"),
    "UpdateHashRangeKeyValidator.check_for_hash_or_range_key": (
        validators.UpdateHashRangeKeyValidator,
        "a453e5e1e3fe9d37",
    ),
    "DepthFirstTraverser.pre_processing_of_child": (ast_nodes.DepthFirstTraverser, "7081127933bb856d"),
    "DepthFirstTraverser.traverse": (ast_nodes.DepthFirstTraverser, "c78f8583f1961be7"),
    "Node.find_clauses": (ast_nodes.Node, "b77be7ac447d7617"),
    "DynamoDBBackend.update_item": (dynamodb_models.DynamoDBBackend, "218984588dd689a5"),
    "DynamoHandler.update_item": (dynamodb_responses.DynamoHandler, "638893af1afd43d2"),
    "DynamoHandler.transact_write_items": (dynamodb_responses.DynamoHandler, "61c163fff213f33a"),
    **{
        f"{walk.__name__}._processing_map": (walk, digest)
        for walk, digest in (
            (validators.ExpressionAttributeValueProcessor, "ba7ac722dd99eda0"),
            (validators.ExpressionAttributeResolvingProcessor, "e0db7e67c8377b4b"),
            (validators.UpdateExpressionFunctionEvaluator, "963e6192c63605a1"),
            (validators.NoneExistingPathChecker, "84f5f73e1879cce6"),
            (validators.ExecuteOperations, "e60064603958af82"),
            (validators.EmptyStringKeyValueValidator, "2c47430d926eba38"),
            (validators.TypeMismatchValidator, "55798dad6e83982f"),
            (validators.UpdateHashRangeKeyValidator, "df2a9d35f957e814"),
            (validators.OverlappingPathsValidator, "3a8f70105fee8882"),
            (validators.ActionCountValidator, "18efe0644265d711"),
        )
    },
}


def changed_moto_code() -> list[str]:
    return list(_changed())


@functools.cache
def _changed() -> tuple[str, ...]:  # (moto's code does not change within a process: read once, not each test)
    changed = []
    for name, (owner, digest) in CHECKED_SOURCES.items():
        source = inspect.getsource(getattr(owner, name.split(".")[1]))
        if hashlib.sha256(source.encode()).hexdigest()[:16] != digest:
            changed.append(name)
    return tuple(changed)


def speedup_applies() -> bool:
    return not changed_moto_code()


class _IdentityCopy:
    """Stands in for the ``copy`` module inside moto's dynamodb models while a transaction runs:
    the whole-table backup becomes the table itself (restored item by item instead, see below)."""

    def deepcopy(self, value: Any, memo: Any = None) -> Any:
        if isinstance(value, dynamodb_models.Table):
            return value
        return copy.deepcopy(value, memo)

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


def _keys(backend: Any, transact_items: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    keys = []
    for item in transact_items:
        if len(item) != 1:
            continue  # moto raises for this itself
        op_type, op = next(iter(item.items()))
        table_name = op.get("TableName")
        table = backend.tables.get(table_name)
        if table is None:
            continue
        if op_type == "Put":
            attrs = op.get("Item", {})
            key = {table.hash_key_attr: attrs.get(table.hash_key_attr)}
            if table.range_key_attr is not None:
                key[table.range_key_attr] = attrs.get(table.range_key_attr)
            if any(v is None for v in key.values()):
                continue
        else:
            key = op.get("Key")
            if not key:
                continue
        keys.append((table_name, key))
    return keys


def _patched(original: Any) -> Any:
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        before = []
        for table_name, key in _keys(self, transact_items):
            try:
                current = self.get_item(table_name, key)
            except Exception:
                continue  # an invalid key: moto reports it when it runs the transaction
            before.append((table_name, key, copy.deepcopy(current.to_json()["Attributes"]) if current else None))
        with mock.patch.object(dynamodb_models, "copy", _IdentityCopy()):
            try:
                return original(self, transact_items)
            except BaseException:
                for table_name, key, attributes in reversed(before):
                    table = self.tables[table_name]
                    if attributes is None:
                        if self.get_item(table_name, key) is not None:
                            self.delete_item(table_name, key)
                    else:
                        table.put_item(attributes)
                raise

    return transact_write_items


def _partition_query(original: Any) -> Any:
    signature = inspect.signature(original)

    def query(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        hash_key = bound.arguments.get("hash_key")
        if bound.arguments.get("index_name") or hash_key is None or not self.range_key_attr:
            return original(self, *args, **kwargs)
        partition = self.items.get(hash_key) or {}
        # What all_items() returns, restricted to the partition moto's query keeps anyway: moto's order, by
        # (hash key, range key), is the range keys' order within one partition, and a range key compares by
        # its cast value (one attribute type per key), here taken once per item rather than per comparison.
        items = sorted(partition.values(), key=lambda x: x.range_key.cast_value)
        with mock.patch.object(self, "all_items", return_value=items):
            return original(self, *args, **kwargs)

    return query


def _top_level_project(original: Any) -> Any:
    def project(self: Any, projection_expressions: list[list[str]]) -> Any:
        names = [path[0] for path in projection_expressions if len(path) == 1 and "[" not in path[0]]
        if len(names) != len(projection_expressions):
            return original(self, projection_expressions)
        attrs = {name: self.attrs[name] for name in names if name in self.attrs}
        return dynamo_type.Item(hash_key=self.hash_key, range_key=self.range_key, attrs=attrs)

    return project


#: The operations whose output is items, keys, counts and consumed capacity.
ITEM_OPERATIONS = frozenset(
    {
        "GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "BatchGetItem", "BatchWriteItem",
        "TransactGetItems", "TransactWriteItems",
    }
)  # fmt: skip


def _json_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def _item_response(original: Any) -> Any:
    def execute_result(self: Any, context: Any) -> Any:
        serializer = context.serializer_class(operation_model=context.operation_model)
        if context.operation_model.name not in ITEM_OPERATIONS or serializer._is_error_result(self.result):
            return original(self, context)
        response = serializer._create_default_response()
        headers = {"Content-Type": serializer._get_protocol_specific_content_type()}
        return response["status_code"], headers, json.dumps(_json_value(self.result))

    return execute_result


#: Held while moto serves a DynamoDB request.
_ONE_REQUEST = threading.RLock()


#: Parsed update expressions by their text (a workload uses a few dozen; the bound only guards memory).
_PARSED: dict[str, Any] = {}
_PARSED_MAX = 4096


def _parsed_once(original: Any) -> Any:
    def make(cls: Any, expression_str: str) -> Any:
        tree = _PARSED.get(expression_str)
        if tree is None:
            tree = original.__func__(cls, expression_str)  # (an invalid text raises every time, as moto does)
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[expression_str] = tree
        return tree

    return classmethod(make)


def _kinds(walk: Any) -> dict[Any, Any]:
    """The walk's table of node kinds, built once per walk (a literal of its own bound methods)."""
    table = walk.__dict__.get("_kinds")
    if table is None:
        table = walk.__dict__["_kinds"] = walk._processing_map()
    return table


#: Whether a type is one of moto's AST nodes (``Node`` is an ABC: each isinstance check walks its registry).
_IS_NODE: dict[type, bool] = {}


def _traverse_node_recursively(self: Any, node: Any, child_id: int = -1) -> Any:
    """moto's depth-first walk, its type checks answered once per type (the classes never change)."""
    kind = type(node)
    is_node = _IS_NODE.get(kind)
    if is_node is None:
        is_node = _IS_NODE[kind] = isinstance(node, ast_nodes.Node)
    if is_node:
        parent_node = node.parent
        if node.children is not None:
            for i, child_node in enumerate(node.children):
                self.pre_processing_of_child(node, i)
                self.traverse_node_recursively(child_node, i)
        processed = self.__dict__.setdefault("_processed", {})
        wanted = processed.get(kind)
        if wanted is None:
            wanted = processed[kind] = isinstance(node, self.nodes_to_be_processed())
        if wanted:
            node = self.process(node)
            node.parent = parent_node
            if parent_node:
                parent_node.children[child_id] = node
    return node


def _process(self: Any, node: Any) -> Any:
    for class_key, processor in _kinds(self).items():
        if isinstance(node, class_key):
            return processor(node)
    return None


#: The node classes whose instances ``deepcopy`` copies attribute by attribute (no copy hooks of their own).
_PLAIN: dict[type, bool] = {}
_ATOMS = frozenset({str, int, float, bool, type(None)})


def _plain(kind: type) -> bool:
    plain = _PLAIN.get(kind)
    if plain is None:
        plain = _PLAIN[kind] = (
            issubclass(kind, ast_nodes.Node)
            and not hasattr(kind, "__deepcopy__")
            and not hasattr(kind, "__setstate__")
            and kind.__reduce_ex__ is object.__reduce_ex__
            and kind.__reduce__ is object.__reduce__
            and kind.__getstate__ is object.__getstate__
            and all("__slots__" not in vars(k) for k in kind.__mro__)
        )
    return plain


def _tree_copy(tree: Any) -> Any:
    """``deepcopy(tree)`` for a parsed expression: a tree whose nodes hold atoms (text, numbers) and their
    children, each child's parent its node, none twice; anything else goes to ``deepcopy``."""
    copied = _copy_node(tree, None, set()) if _plain(type(tree)) and tree.parent is None else None
    return copy.deepcopy(tree) if copied is None else copied


def _copy_node(node: Any, parent: Any, seen: set[int]) -> Any:
    if id(node) in seen:
        return None
    seen.add(id(node))
    new = object.__new__(type(node))
    state = {}
    for name, value in node.__dict__.items():
        if name == "parent":
            state[name] = parent
        elif name == "children" and type(value) is list:
            children = []
            for child in value:
                if type(child) in _ATOMS:
                    children.append(child)
                    continue
                if not _plain(type(child)) or child.parent is not node:
                    return None
                copied = _copy_node(child, new, seen)
                if copied is None:
                    return None
                children.append(copied)
            state[name] = children
        elif type(value) in _ATOMS:
            state[name] = value
        else:
            return None
    new.__dict__.update(state)
    return new


def _validator_init(
    self: Any, expression: Any, expression_attribute_names: Any, expression_attribute_values: Any, item: Any, table: Any
) -> None:
    """moto's ``Validator.__init__``, its tree copied by ``_tree_copy`` and the tree it copied kept."""
    self.expression_attribute_names = expression_attribute_names
    self.expression_attribute_values = expression_attribute_values
    self.item = item
    self.table = table
    self.processors = self.get_ast_processors()
    self.node_to_validate = _tree_copy(expression)
    self._parsed = expression


#: (parsed tree, its attribute names, the table's key attributes) that passed the first three walks.
_WELL_FORMED: set[tuple[Any, ...]] = set()
_CHECKS = (
    validators.ActionCountValidator,
    validators.OverlappingPathsValidator,
    validators.UpdateHashRangeKeyValidator,
)


def _checked_key(validator: Any) -> tuple[Any, ...] | None:
    names = validator.expression_attribute_names
    try:
        key = (
            validator._parsed,
            None if names is None else frozenset(names.items()),
            tuple(validator.table.table_key_attrs),
        )
        hash(key)
    except TypeError:
        return None
    return key


def _validate(self: Any) -> Any:
    """moto's walks in moto's order, the checks that only read the tree once per expression, names and keys."""
    checks = len(_CHECKS)
    key = _checked_key(self) if tuple(map(type, self.processors[:checks])) == _CHECKS else None
    passed = key is not None and key in _WELL_FORMED
    n = self.node_to_validate
    for i, processor in enumerate(self.processors):
        if i < checks and passed:
            continue
        n = processor.traverse(n)
        if i == checks - 1 and key is not None:
            if len(_WELL_FORMED) >= _PARSED_MAX:
                _WELL_FORMED.clear()
            _WELL_FORMED.add(key)
    return n


def _one_at_a_time(original: Any) -> Any:
    def call_action(self: Any) -> Any:
        with _ONE_REQUEST:
            return original(self)

    return call_action


@contextmanager
def moto_dynamodb_speedups() -> Iterator[None]:
    """Apply the patches for the duration of the block (process-wide: moto's classes are patched)."""
    changed = changed_moto_code()
    if changed:
        # Correct but slow beats fast and subtly wrong: patch nothing on moto code not checked.
        warnings.warn(
            f"moto {moto.__version__} changed {', '.join(changed)}: DynamoDB speedups not applied", stacklevel=3
        )
        yield
        return
    transact = _patched(dynamodb_models.DynamoDBBackend.transact_write_items)
    query = _partition_query(table_models.Table.query)
    project = _top_level_project(dynamo_type.Item.project)
    respond = _item_response(ActionResult.execute_result)
    atomic = _one_at_a_time(dynamodb_responses.DynamoHandler.call_action)
    parse = _parsed_once(inspect.getattr_static(expressions.UpdateExpressionParser, "make"))
    with (
        mock.patch.object(dynamodb_responses.DynamoHandler, "call_action", atomic),
        mock.patch.object(dynamodb_models.DynamoDBBackend, "transact_write_items", transact),
        mock.patch.object(table_models.Table, "query", query),
        mock.patch.object(dynamo_type.Item, "project", project),
        mock.patch.object(dynamodb_responses.DynamoResult, "execute_result", respond, create=True),
        mock.patch.object(expressions.UpdateExpressionParser, "make", parse),
        mock.patch.object(ast_nodes.DepthFirstTraverser, "process", _process),
        mock.patch.object(ast_nodes.DepthFirstTraverser, "traverse_node_recursively", _traverse_node_recursively),
        mock.patch.object(validators.Validator, "__init__", _validator_init),
        mock.patch.object(validators.UpdateExpressionValidator, "validate", _validate),
    ):
        yield
