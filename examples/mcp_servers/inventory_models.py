"""A shop's stock room as an MCP server whose tools return pydantic models (FastMCP, stdio).

Style under test: typed results, so every result carries ``structuredContent``; ``place_order``
answers with a one-word text and puts the order only in ``structuredContent``, as a server written
against the MCP structured-output spec may; errors are exceptions.

Run:
    python examples/mcp_servers/inventory_models.py
"""

from __future__ import annotations

from mcp.server.fastmcp import FastMCP
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

mcp = FastMCP("inventory")


class Item(BaseModel):
    sku: str
    name: str
    stock: int


class Order(BaseModel):
    order_id: int
    sku: str
    quantity: int
    status: str


ITEMS = {"SKU-100": Item(sku="SKU-100", name="desk lamp", stock=4),
         "SKU-200": Item(sku="SKU-200", name="office chair", stock=2)}  # fmt: skip
ORDERS: dict[int, Order] = {}


@mcp.tool()
def list_items() -> list[Item]:
    """Every item in stock, with its SKU and how many are left."""
    return list(ITEMS.values())


@mcp.tool()
def get_item(sku: str) -> Item:
    """One item by SKU."""
    if sku not in ITEMS:
        raise LookupError(f"unknown SKU {sku}")
    return ITEMS[sku]


@mcp.tool()
def restock(sku: str, quantity: int) -> Item:
    """Add delivered units of an item to the stock."""
    if sku not in ITEMS:
        raise LookupError(f"unknown SKU {sku}")
    ITEMS[sku].stock += quantity
    return ITEMS[sku]


@mcp.tool()
def place_order(sku: str, quantity: int) -> CallToolResult:
    """Order units of an item for a customer; they leave the stock."""
    item = ITEMS.get(sku)
    if item is None or item.stock < quantity or quantity < 1:
        raise ValueError(f"cannot order {quantity} of {sku}")
    item.stock -= quantity
    order = Order(order_id=len(ORDERS) + 501, sku=sku, quantity=quantity, status="placed")
    ORDERS[order.order_id] = order
    return CallToolResult(content=[TextContent(type="text", text="Order placed.")],
                          structuredContent=order.model_dump())  # fmt: skip


@mcp.tool()
def cancel_order(order_id: int) -> Order:
    """Cancel a placed order; its units go back to the stock."""
    order = ORDERS.get(order_id)
    if order is None or order.status != "placed":
        raise LookupError(f"no placed order {order_id}")
    order.status = "cancelled"
    ITEMS[order.sku].stock += order.quantity
    return order


if __name__ == "__main__":
    mcp.run()
